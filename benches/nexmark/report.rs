//! The Nexmark benchmark's figures: one line per measurement for the terminal, and the
//! generated section of `docs/benchmarks.md` (a table per query and parallelism) with a
//! chart of events/s per query drawn beside it as SVG.

use std::fmt::Write as _;
use std::path::Path;

/// The processing time of the batch side's bids (only q12 reads it).
pub const PROCESSING_TIME_MICROS: i64 = 1_714_557_603_000_000;

/// One query at one parallelism.
pub struct Measurement {
    pub parallelism: usize,
    pub events_per_second: f64,
    /// The process's peak resident memory while the query ran.
    pub peak_rss_bytes: Option<u64>,
    /// The largest committed checkpoint's state while it ran.
    pub state_bytes: Option<u64>,
    /// How long each committed checkpoint took, barrier injected to manifest written.
    pub checkpoint_millis: Vec<u64>,
}

pub struct QueryResult {
    pub name: String,
    /// DataFusion in batch over the same events (`None`: it cannot run the query).
    pub batch_events_per_second: Option<f64>,
    /// At parallelism 1, then 2.
    pub runs: Vec<Measurement>,
}

pub struct Run {
    pub events: u64,
    pub generator_events_per_second: f64,
    /// The bid source alone at parallelism 1, then 2.
    pub source_alone: Vec<Measurement>,
    pub queries: Vec<QueryResult>,
    /// The bid-shaped `datagen` jobs, the source alone first (empty when not run).
    pub datagen: Vec<QueryResult>,
}

/// Starts a new peak for [`peak_rss_bytes`] (Linux: writing 5 to `clear_refs` resets the
/// high-water mark). The engine runs in this process, so the figure is the whole
/// benchmark's, allocator's free lists included.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The peak resident memory since the last [`reset_peak_rss`] (`VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The terminal's line for one measurement.
pub fn line(name: &str, m: &Measurement, source: &Measurement, batch: Option<f64>) -> String {
    format!(
        "{name:<14} {:>11} {:>14.0} events/s  ({:.2} x source alone, {} x batch)  peak RSS {}, state {}, checkpoints {}",
        format!("parallel {}", m.parallelism),
        m.events_per_second,
        m.events_per_second / source.events_per_second,
        batch
            .map(|b| format!("{:.2}", m.events_per_second / b))
            .unwrap_or_else(|| "-".into()),
        megabytes(m.peak_rss_bytes),
        megabytes(m.state_bytes),
        checkpoints(&m.checkpoint_millis),
    )
}

const BEGIN: &str = "<!-- nexmark-report:begin";
const BEGIN_LINE: &str =
    "<!-- nexmark-report:begin (written by scripts/bench.sh: edits here are overwritten) -->";
const END: &str = "<!-- nexmark-report:end -->";
const CHART: &str = "nexmark-throughput.svg";

/// Rewrites the generated section of the Markdown file at `path` (appending it the first
/// time) and writes the chart next to the file.
pub fn write(run: &Run, path: &Path) -> std::io::Result<()> {
    std::fs::write(path.with_file_name(CHART), chart(run))?;
    let doc = std::fs::read_to_string(path).unwrap_or_default();
    let section = section(run);
    let doc = match (doc.find(BEGIN), doc.find(END)) {
        (Some(begin), Some(end)) if begin < end => {
            format!("{}{section}{}", &doc[..begin], &doc[end + END.len()..])
        }
        _ => format!("{}\n{section}\n", doc.trim_end()),
    };
    std::fs::write(path, doc)
}

fn section(run: &Run) -> String {
    let mut s = String::new();
    let source = |p: usize| run.source_alone[p - 1].events_per_second;
    let _ = writeln!(s, "{BEGIN_LINE}");
    let _ = writeln!(
        s,
        "## Every Nexmark query, the whole benchmark (issue #12)\n"
    );
    let _ = writeln!(
        s,
        "- Command: `EDDY_BENCH_EVENTS={} scripts/bench.sh` ({} events per query and parallelism; release build)",
        run.events,
        thousands(run.events as f64)
    );
    let _ = writeln!(s, "- Commit: {}", commit());
    let _ = writeln!(
        s,
        "- Machine: {}; the engine in process with 2 streaming workers, RocksDB state in a \
         temporary directory, checkpoints every second to a local directory (the defaults).",
        machine()
    );
    let _ = writeln!(
        s,
        "- Baselines in the same run: the `nexmark` crate's generator alone ({} events/s); the \
         bid source alone into a blackhole sink ({} events/s at parallelism 1, {} at 2); \
         DataFusion computing each query once in batch over the same events held in memory.",
        thousands(run.generator_events_per_second),
        thousands(source(1)),
        thousands(source(2)),
    );
    let _ = writeln!(
        s,
        "- Peak RSS is the benchmark process's (engine, allocator and the batch side's events \
         together), reset before each query; state is the largest committed checkpoint while \
         the query ran; checkpoints are those committed while it ran, with their mean and \
         longest duration (barrier injected to manifest written).\n"
    );
    let _ = writeln!(
        s,
        "![events/s per Nexmark query at parallelism 1 and 2]({CHART})\n"
    );
    let _ = writeln!(
        s,
        "| query | parallelism | events/s | × bid source | × DataFusion batch | × parallelism 1 | peak RSS | state | checkpoints (mean / longest) |"
    );
    let _ = writeln!(
        s,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for q in &run.queries {
        for m in &q.runs {
            let rate = m.events_per_second;
            let batch = q
                .batch_events_per_second
                .map(|b| format!("{:.2}", rate / b))
                .unwrap_or_else(|| "–".into());
            let scaling = if m.parallelism == 1 {
                "–".to_string()
            } else {
                format!("{:.2}", rate / q.runs[0].events_per_second)
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} | {batch} | {scaling} | {} | {} | {} |",
                q.name,
                m.parallelism,
                thousands(rate),
                rate / source(m.parallelism),
                megabytes(m.peak_rss_bytes),
                megabytes(m.state_bytes),
                checkpoints(&m.checkpoint_millis),
            );
        }
    }
    let _ = writeln!(
        s,
        "\nDataFusion's batch rate per query, events/s: {}.",
        run.queries
            .iter()
            .map(|q| format!(
                "{} {}",
                q.name,
                q.batch_events_per_second
                    .map(thousands)
                    .unwrap_or_else(|| "– (cannot run it)".into())
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(alone) = run.datagen.first() {
        let _ = writeln!(
            s,
            "\n### The bid-shaped `datagen` jobs (issue #12's comparison with Flink)\n\n\
             A `datagen` source `bid` of {} rows: `auction` uniform in 1000..1999, `bidder` in \
             1..1 000 000, `price` in 1..100 000, `date_time` advancing 1 ms per row (watermark \
             4 s behind), `channel`, `url`, `extra` random strings of 10, 20 and 10 characters; \
             each job into a blackhole sink. Rows/s, against that source alone in the same run.\n",
            thousands(run.events as f64)
        );
        let _ = writeln!(
            s,
            "| job | parallelism | rows/s | × datagen source | × parallelism 1 | peak RSS | state | checkpoints (mean / longest) |"
        );
        let _ = writeln!(
            s,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for q in &run.datagen {
            for m in &q.runs {
                let rate = m.events_per_second;
                let scaling = if m.parallelism == 1 {
                    "–".to_string()
                } else {
                    format!("{:.2}", rate / q.runs[0].events_per_second)
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:.2} | {scaling} | {} | {} | {} |",
                    q.name,
                    m.parallelism,
                    thousands(rate),
                    rate / alone.runs[m.parallelism - 1].events_per_second,
                    megabytes(m.peak_rss_bytes),
                    megabytes(m.state_bytes),
                    checkpoints(&m.checkpoint_millis),
                );
            }
        }
    }
    s.push_str(END);
    s
}

/// A horizontal bar chart, logarithmic in events/s: per query a bar at parallelism 1 and
/// one at 2, with the bid source alone as dashed lines.
fn chart(run: &Run) -> String {
    const LEFT: f64 = 70.0;
    const WIDTH: f64 = 720.0;
    const TOP: f64 = 50.0;
    const ROW: f64 = 26.0;
    // From 10k to the decade above the fastest query (at least 10M).
    let fastest = run
        .queries
        .iter()
        .flat_map(|q| q.runs.iter().map(|m| m.events_per_second))
        .fold(1e7_f64, f64::max);
    let top_decade = (fastest.log10().ceil() as i32).clamp(7, 9);
    let (low, high) = (4.0, top_decade as f64);
    let x = |rate: f64| LEFT + WIDTH * ((rate.max(1e4).log10() - low) / (high - low)).min(1.0);
    let height = TOP + ROW * run.queries.len() as f64 + 40.0;
    let total_width = LEFT + WIDTH + 30.0;
    let colors = ["#4e79a7", "#f28e2b"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="18" font-size="14">Nexmark events/s per query ({} events, log scale)</text>"#,
        thousands(run.events as f64)
    );
    for (i, color) in colors.iter().enumerate() {
        let lx = LEFT + 160.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="28" width="12" height="10" fill="{color}"/><text x="{}" y="37">parallelism {}</text>"#,
            lx + 16.0,
            i + 1
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{0}" y1="33" x2="{1}" y2="33" stroke="#555" stroke-dasharray="4 3"/><text x="{2}" y="37">bid source alone</text>"##,
        LEFT + 320.0,
        LEFT + 340.0,
        LEFT + 344.0
    );
    let bottom = TOP + ROW * run.queries.len() as f64;
    for decade in 4..=top_decade {
        let tx = x(10f64.powi(decade));
        let label = ["10k", "100k", "1M", "10M", "100M", "1G"][decade as usize - 4];
        let _ = writeln!(
            s,
            r##"<line x1="{tx}" y1="{TOP}" x2="{tx}" y2="{bottom}" stroke="#ddd"/><text x="{tx}" y="{}" text-anchor="middle">{label}</text>"##,
            bottom + 16.0
        );
    }
    for (row, q) in run.queries.iter().enumerate() {
        let y = TOP + ROW * row as f64;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y + 16.0,
            q.name
        );
        for (i, m) in q.runs.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<rect x="{LEFT}" y="{}" width="{:.1}" height="10" fill="{}"><title>{} at parallelism {}: {} events/s</title></rect>"#,
                y + 3.0 + 11.0 * i as f64,
                x(m.events_per_second) - LEFT,
                colors[i % 2],
                q.name,
                m.parallelism,
                thousands(m.events_per_second)
            );
        }
    }
    for source in &run.source_alone {
        let sx = x(source.events_per_second);
        let _ = writeln!(
            s,
            r##"<line x1="{sx:.1}" y1="{TOP}" x2="{sx:.1}" y2="{bottom}" stroke="{}" stroke-dasharray="4 3"/>"##,
            colors[(source.parallelism - 1) % 2]
        );
    }
    s.push_str("</svg>\n");
    s
}

/// `1 234 567`: the spacing `docs/benchmarks.md` uses.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

fn megabytes(bytes: Option<u64>) -> String {
    bytes
        .map(|b| format!("{:.0} MB", b as f64 / 1e6))
        .unwrap_or_else(|| "–".into())
}

fn checkpoints(millis: &[u64]) -> String {
    if millis.is_empty() {
        return "0".into();
    }
    let mean = millis.iter().sum::<u64>() / millis.len() as u64;
    let longest = millis.iter().max().copied().unwrap_or(0);
    format!("{} ({mean} / {longest} ms)", millis.len())
}

/// The commit measured, whether the work tree had changes, and the day.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let hash = git(&["rev-parse", "--short", "HEAD"]);
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "`{hash}`{}, measured {date}",
        if dirty {
            " with uncommitted changes"
        } else {
            ""
        }
    )
}

/// Cores, processor model and memory, as Linux reports them.
fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown processor".into());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    format!("{cores} cores ({cpu}), {memory_gib:.0} GiB, Linux")
}
