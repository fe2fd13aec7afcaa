//! A real Kafka-protocol broker (tansu, installed by `scripts/setup-kafka.sh`) on a free
//! port with in-memory storage, and a client to produce to it and read topics back.
//! Stopped when dropped.

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct KafkaBroker {
    child: Child,
    /// `127.0.0.1:port`, for `properties.bootstrap.server`.
    pub address: String,
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One message read back.
#[derive(Debug, Clone)]
pub struct Received {
    pub key: Option<String>,
    pub value: Option<String>,
    /// The key and value as sent (binary encodings such as Avro).
    pub raw_key: Option<Vec<u8>>,
    pub raw_value: Option<Vec<u8>>,
}

fn tansu() -> PathBuf {
    let path = std::env::var("EDDY_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/eddy-tools"))
        .join("bin/tansu");
    assert!(
        path.exists(),
        "{} is missing: run the test suite with scripts/test.sh, which installs it",
        path.display()
    );
    path
}

impl KafkaBroker {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let broker = Self {
            child,
            address: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tansu did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let status = Command::new(tansu())
            .args([
                "topic",
                "create",
                name,
                "--broker",
                &format!("tcp://{}", self.address),
                "--partitions",
                &partitions.to_string(),
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "create topic {name}");
    }

    /// Sends `(partition, value)` messages and waits until the broker has them all.
    pub fn produce(&self, topic: &str, messages: &[(i32, String)]) {
        let bytes: Vec<(i32, Vec<u8>)> = messages
            .iter()
            .map(|(p, v)| (*p, v.clone().into_bytes()))
            .collect();
        self.produce_bytes(topic, &bytes);
    }

    /// Sends `(partition, value)` messages with binary values and waits until the broker
    /// has them all.
    pub fn produce_bytes(&self, topic: &str, messages: &[(i32, Vec<u8>)]) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .create()
            .unwrap();
        for (partition, value) in messages {
            loop {
                let record: BaseRecord<'_, (), [u8]> = BaseRecord::to(topic)
                    .payload(value.as_slice())
                    .partition(*partition);
                match producer.send(record) {
                    Ok(()) => break,
                    Err(_) => {
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }

    /// Sends `(key, value)` messages (no value: a tombstone) to partition 0, in order.
    pub fn produce_changes(&self, topic: &str, messages: &[(&str, Option<&str>)]) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .create()
            .unwrap();
        for (key, value) in messages {
            let mut record: BaseRecord<'_, str, str> = BaseRecord::to(topic).key(*key).partition(0);
            if let Some(value) = value {
                record = record.payload(*value);
            }
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }

    /// Sends `(key, value)` messages with binary keys and values (no value: a tombstone)
    /// to partition 0, in order.
    pub fn produce_raw_changes(&self, topic: &str, messages: &[(Vec<u8>, Option<Vec<u8>>)]) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .create()
            .unwrap();
        for (key, value) in messages {
            let mut record: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(topic).key(key.as_slice()).partition(0);
            if let Some(value) = value {
                record = record.payload(value.as_slice());
            }
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }

    /// Sends `(partition, key, value)` messages, each with header `h` = its key.
    pub fn produce_keyed(&self, topic: &str, messages: &[(i32, String, String)]) {
        use rdkafka::message::{Header, OwnedHeaders};
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .create()
            .unwrap();
        for (partition, key, value) in messages {
            let headers = OwnedHeaders::new().insert(Header {
                key: "h",
                value: Some(key.as_str()),
            });
            let record: BaseRecord<'_, str, str> = BaseRecord::to(topic)
                .key(key.as_str())
                .payload(value.as_str())
                .partition(*partition)
                .headers(headers);
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }

    /// Every message of `topic` so far, each partition in offset order: read until none
    /// has come for a second (the broker's high watermarks are not relied on).
    pub fn read_all(&self, topic: &str) -> Vec<Received> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .set("group.id", "eddy-tests")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let mut assignment = TopicPartitionList::new();
        for p in metadata.topics()[0].partitions() {
            assignment
                .add_partition_offset(topic, p.id(), Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&assignment).unwrap();
        let mut received = Vec::new();
        let mut last = Instant::now();
        while last.elapsed() < Duration::from_secs(1) {
            if let Some(message) = consumer.poll(Duration::from_millis(50)) {
                let message = message.unwrap();
                received.push(Received {
                    key: message
                        .key()
                        .map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: message
                        .payload()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                    raw_key: message.key().map(<[u8]>::to_vec),
                    raw_value: message.payload().map(<[u8]>::to_vec),
                });
                last = Instant::now();
            }
        }
        received
    }
}
