//! The exposition in parts, so that a scrape costs a copy.
//!
//! Almost every series changes only when the index does: those are
//! rendered once per change (the *index part*) and shared. Two families
//! move with the clock, `captf_state_lock_age_seconds` and
//! `captf_state_lock_overdue`: their sample lines are kept as label
//! prefixes plus each lock's clock (what its age counts from, its class
//! and timeout), and only their values are written at scrape time. Watch
//! health and the self-metric counters (the *health part*) are small and
//! rendered whole. A scrape's body is the index part's text with the two
//! timed blocks rewritten, then the health part: the same bytes an
//! uncached render at that instant gives (a test shows it).

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use prometheus_client::registry::Registry;

use super::gzip_parts;
use super::snapshot::LockRow;
use super::{Format, LockCollector, Part};
use crate::core::classify::{is_overdue, HolderClass};
use crate::index::unix_seconds;
use crate::shared::Shared;

/// What a held lock's timed values are computed from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LockClock {
    base: f64,
    class: HolderClass,
    timeout: i64,
}

impl LockClock {
    pub(super) fn of(row: &LockRow) -> LockClock {
        LockClock {
            base: row.base,
            class: row.class,
            timeout: row.timeout,
        }
    }

    /// Age at `now_s`; a future `Created` counts as 0 (as the index does).
    fn age(&self, now_s: f64) -> f64 {
        (now_s - self.base).max(0.0)
    }
}

/// Sample lines of one timed family in the index part's text.
#[derive(Clone, Debug, Default)]
struct Block {
    /// The byte range of all its sample lines.
    span: Range<usize>,
    /// Per line: where it starts and where its value starts.
    lines: Vec<(usize, usize)>,
}

impl Block {
    /// Finds the contiguous sample lines of `family` in `text`.
    fn find(text: &str, family: &str) -> Block {
        let prefix = format!("{family}{{");
        let mut block = Block::default();
        let mut pos = 0;
        for line in text.split_inclusive('\n') {
            let start = pos;
            pos += line.len();
            if !line.starts_with(&prefix) {
                if !block.lines.is_empty() {
                    break;
                }
                continue;
            }
            let Some(space) = line.rfind(' ') else {
                continue;
            };
            if block.lines.is_empty() {
                block.span.start = start;
            }
            block.span.end = pos;
            block.lines.push((start, start + space + 1));
        }
        block
    }

    /// The block rewritten with one value per line.
    fn write(&self, text: &[u8], values: impl Iterator<Item = f64>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.span.len() + self.lines.len() * 8);
        let mut buf = dtoa::Buffer::new();
        for (&(start, value_at), v) in self.lines.iter().zip(values) {
            out.extend_from_slice(text.get(start..value_at).unwrap_or_default());
            out.extend_from_slice(buf.format_finite(v).as_bytes());
            out.push(b'\n');
        }
        out
    }
}

/// The part of the exposition that only the index changes, with the
/// timed families located in it.
pub(crate) struct IndexPart {
    text: Bytes,
    age: Block,
    overdue: Block,
    clocks: Vec<LockClock>,
    /// The text around the two timed blocks, compressed once: three parts
    /// of the gzip stream a scrape's body completes (see `gzip_parts`).
    gz: Option<[gzip_parts::Part; 3]>,
}

/// One encoded registry in `format`, without the OpenMetrics `# EOF`.
fn encode(registry: &Registry, format: Format, capacity: usize) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(capacity);
    match format {
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(&mut out, registry)?
        }
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?
        }
    }
    Ok(out)
}

impl IndexPart {
    /// Renders the index part at `now` into a buffer of `capacity` bytes.
    pub(crate) fn render(
        shared: &Arc<Shared>,
        format: Format,
        now: SystemTime,
        capacity: usize,
    ) -> Result<IndexPart, std::fmt::Error> {
        let clocks = Arc::new(Mutex::new(Vec::new()));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(LockCollector {
            shared: shared.clone(),
            now,
            part: Part::Index,
            clocks: Some(clocks.clone()),
        }));
        let text = encode(&registry, format, capacity)?;
        drop(registry);
        let clocks = match Arc::try_unwrap(clocks) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
            Err(shared) => match shared.lock() {
                Ok(c) => c.clone(),
                Err(p) => p.into_inner().clone(),
            },
        };
        let age = Block::find(&text, "captf_state_lock_age_seconds");
        let overdue = Block::find(&text, "captf_state_lock_overdue");
        // The encoder writes both families in lock order, one line per
        // held lock, age before overdue; anything else would misplace a
        // value, so it is checked, not assumed.
        let consistent = age.lines.len() == clocks.len()
            && overdue.lines.len() == clocks.len()
            && age.span.end <= overdue.span.start;
        if !consistent {
            return Err(std::fmt::Error);
        }
        Ok(IndexPart {
            text: Bytes::from(text),
            age,
            overdue,
            clocks,
            gz: None,
        })
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }

    /// The text around the timed blocks: before age, between, after.
    fn around(&self) -> [Bytes; 3] {
        [
            self.text.slice(..self.age.span.start),
            self.text.slice(self.age.span.end..self.overdue.span.start),
            self.text.slice(self.overdue.span.end..),
        ]
    }

    /// Compresses the text around the timed blocks.
    pub(crate) fn compress(&mut self) -> std::io::Result<()> {
        let [a, b, c] = self.around();
        self.gz = Some([
            gzip_parts::part(&a, false)?,
            gzip_parts::part(&b, false)?,
            gzip_parts::part(&c, false)?,
        ]);
        Ok(())
    }

    /// The two timed blocks at `now`.
    fn timed_blocks(&self, now: SystemTime) -> (Vec<u8>, Vec<u8>) {
        let now_s = unix_seconds(now);
        // Bytes, not str: validating 50 MB of UTF-8 per assembly would cost
        // more than the assembly; the slices are whole lines of the text.
        let text = &self.text[..];
        let ages = self
            .age
            .write(text, self.clocks.iter().map(|c| c.age(now_s)));
        let overdue = self.overdue.write(
            text,
            self.clocks.iter().map(|c| {
                if is_overdue(c.class, c.age(now_s), c.timeout) {
                    1.0
                } else {
                    0.0
                }
            }),
        );
        (ages, overdue)
    }

    /// A whole body at `now`, as chunks: this part with its timed blocks
    /// written, then `health` (the health part). With `gzip`, one gzip
    /// stream whose unchanged parts were compressed with the render.
    pub(crate) fn assemble(
        &self,
        now: SystemTime,
        health: String,
        gzip: bool,
    ) -> std::io::Result<Vec<Bytes>> {
        let (ages, overdue) = self.timed_blocks(now);
        match (&self.gz, gzip) {
            (Some([a, b, c]), true) => {
                let ages = gzip_parts::part(&ages, false)?;
                let overdue = gzip_parts::part(&overdue, false)?;
                let health = gzip_parts::part(health.as_bytes(), true)?;
                Ok(gzip_parts::stream(&[a, &ages, b, &overdue, c, &health]))
            }
            _ => {
                let [a, b, c] = self.around();
                Ok(vec![
                    a,
                    Bytes::from(ages),
                    b,
                    Bytes::from(overdue),
                    c,
                    Bytes::from(health),
                ])
            }
        }
    }
}

/// Renders the health part: watch health and the self-metric counters,
/// with the OpenMetrics `# EOF` that ends every body.
pub(crate) fn render_health(
    shared: &Arc<Shared>,
    format: Format,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(LockCollector {
        shared: shared.clone(),
        now: SystemTime::now(),
        part: Part::Health,
        clocks: None,
    }));
    shared
        .health
        .register_counters(registry.sub_registry_with_labels(std::iter::empty()));
    let mut out = encode(&registry, format, 4096)?;
    if format == Format::OpenMetrics {
        prometheus_client::encoding::text::encode_eof(&mut out)?;
    }
    Ok(out)
}
