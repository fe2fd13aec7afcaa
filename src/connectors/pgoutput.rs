//! PostgreSQL's logical replication messages (`pgoutput`, protocol version 1), as
//! `pg_logical_slot_peek_binary_changes` returns them: one message per row.
//!
//! Only what change data capture needs is kept: transaction boundaries with their commit
//! position, relation descriptions (column names), and inserted, updated and deleted rows
//! with each value as PostgreSQL's text (or NULL, or "unchanged" for a TOASTed value an
//! update did not touch).

use crate::error::{EddyError, Result};

/// One column value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// A TOASTed value the change did not touch (not sent).
    Unchanged,
    Text(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The start of a transaction; `final_lsn` is where its commit record is.
    Begin {
        final_lsn: u64,
    },
    /// The end of a transaction; `end_lsn` is where the next one starts.
    Commit {
        end_lsn: u64,
    },
    Relation {
        id: u32,
        namespace: String,
        name: String,
        columns: Vec<String>,
    },
    Insert {
        relation: u32,
        new: Vec<Value>,
    },
    /// `old` is the old row (or its key columns) when the table's replica identity sends it.
    Update {
        relation: u32,
        old: Option<Vec<Value>>,
        new: Vec<Value>,
    },
    /// The old row's key columns (other columns NULL), or the whole old row.
    Delete {
        relation: u32,
        old: Vec<Value>,
    },
    Truncate {
        relations: Vec<u32>,
    },
    /// Messages CDC does not need (origin, type, logical decoding messages).
    Other,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn malformed(what: &str) -> EddyError {
    EddyError::internal(format!("malformed pgoutput message: {what}"))
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at + n;
        let slice = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| malformed("message ends early"))?;
        self.at = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A null-terminated string.
    fn string(&mut self) -> Result<String> {
        let rest = &self.bytes[self.at..];
        let len = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| malformed("unterminated string"))?;
        let s = String::from_utf8_lossy(&rest[..len]).into_owned();
        self.at += len + 1;
        Ok(s)
    }

    fn tuple(&mut self) -> Result<Vec<Value>> {
        let columns = self.u16()?;
        (0..columns)
            .map(|_| match self.u8()? {
                b'n' => Ok(Value::Null),
                b'u' => Ok(Value::Unchanged),
                b't' | b'b' => {
                    let len = self.u32()? as usize;
                    Ok(Value::Text(
                        String::from_utf8_lossy(self.take(len)?).into_owned(),
                    ))
                }
                other => Err(malformed(&format!("tuple value kind {other}"))),
            })
            .collect()
    }
}

/// Parses one message.
pub fn parse(bytes: &[u8]) -> Result<Message> {
    let mut r = Reader { bytes, at: 0 };
    Ok(match r.u8()? {
        b'B' => Message::Begin {
            final_lsn: r.u64()?,
        },
        b'C' => {
            let _flags = r.u8()?;
            let _commit_lsn = r.u64()?;
            Message::Commit { end_lsn: r.u64()? }
        }
        b'R' => {
            let id = r.u32()?;
            let namespace = r.string()?;
            let name = r.string()?;
            let _replica_identity = r.u8()?;
            let count = r.u16()?;
            let mut columns = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let _flags = r.u8()?;
                columns.push(r.string()?);
                let _type = r.u32()?;
                let _typmod = r.u32()?;
            }
            Message::Relation {
                id,
                namespace,
                name,
                columns,
            }
        }
        b'I' => {
            let relation = r.u32()?;
            if r.u8()? != b'N' {
                return Err(malformed("insert without a new tuple"));
            }
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32()?;
            let mut old = None;
            let mut kind = r.u8()?;
            if kind == b'K' || kind == b'O' {
                old = Some(r.tuple()?);
                kind = r.u8()?;
            }
            if kind != b'N' {
                return Err(malformed("update without a new tuple"));
            }
            Message::Update {
                relation,
                old,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32()?;
            let kind = r.u8()?;
            if kind != b'K' && kind != b'O' {
                return Err(malformed("delete without an old tuple"));
            }
            Message::Delete {
                relation,
                old: r.tuple()?,
            }
        }
        b'T' => {
            let count = r.u32()?;
            let _options = r.u8()?;
            Message::Truncate {
                relations: (0..count).map(|_| r.u32()).collect::<Result<_>>()?,
            }
        }
        _ => Message::Other,
    })
}

/// A position as PostgreSQL writes it (`16/B374D848`).
pub fn parse_lsn(text: &str) -> Result<u64> {
    let (high, low) = text
        .split_once('/')
        .ok_or_else(|| malformed(&format!("position '{text}'")))?;
    let high = u64::from_str_radix(high, 16).map_err(|_| malformed(text))?;
    let low = u64::from_str_radix(low, 16).map_err(|_| malformed(text))?;
    Ok((high << 32) | low)
}

pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(values: &[Option<&str>]) -> Vec<u8> {
        let mut out = (values.len() as u16).to_be_bytes().to_vec();
        for v in values {
            match v {
                None => out.push(b'n'),
                Some(s) => {
                    out.push(b't');
                    out.extend((s.len() as u32).to_be_bytes());
                    out.extend(s.as_bytes());
                }
            }
        }
        out
    }

    #[test]
    fn parses_the_messages_cdc_uses() {
        let mut relation = vec![b'R'];
        relation.extend(16384u32.to_be_bytes());
        relation.extend(b"public\0orders\0");
        relation.push(b'd');
        relation.extend(2u16.to_be_bytes());
        for name in ["id", "note"] {
            relation.push(1);
            relation.extend(name.as_bytes());
            relation.push(0);
            relation.extend(23u32.to_be_bytes());
            relation.extend((-1i32).to_be_bytes());
        }
        assert_eq!(
            parse(&relation).unwrap(),
            Message::Relation {
                id: 16384,
                namespace: "public".into(),
                name: "orders".into(),
                columns: vec!["id".into(), "note".into()],
            }
        );
        let mut update = vec![b'U'];
        update.extend(16384u32.to_be_bytes());
        update.push(b'K');
        update.extend(tuple(&[Some("1"), None]));
        update.push(b'N');
        update.extend(tuple(&[Some("2"), Some("it's")]));
        assert_eq!(
            parse(&update).unwrap(),
            Message::Update {
                relation: 16384,
                old: Some(vec![Value::Text("1".into()), Value::Null]),
                new: vec![Value::Text("2".into()), Value::Text("it's".into())],
            }
        );
        let mut begin = vec![b'B'];
        begin.extend(5u64.to_be_bytes());
        begin.extend(0u64.to_be_bytes());
        begin.extend(7u32.to_be_bytes());
        assert_eq!(parse(&begin).unwrap(), Message::Begin { final_lsn: 5 });
        let mut commit = vec![b'C', 0];
        commit.extend(5u64.to_be_bytes());
        commit.extend(9u64.to_be_bytes());
        commit.extend(0u64.to_be_bytes());
        assert_eq!(parse(&commit).unwrap(), Message::Commit { end_lsn: 9 });
        assert!(parse(&update[..update.len() - 2]).is_err());
        assert_eq!(parse_lsn("16/B374D848").unwrap(), 0x16_B374_D848);
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
    }
}
