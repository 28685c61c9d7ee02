//! The figures of a run, as one text line or one JSON object.

use std::time::Duration;

use serde::Serialize;

/// What the client is, in the figures.
pub const CLIENT: &str = "rmcp 3.11";

/// The measured part of a run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Always [`CLIENT`].
    pub client: &'static str,
    /// `borrowed` or `owned`.
    pub mode: &'static str,
    /// Cycles run, failed ones included.
    pub cycles: usize,
    /// Cycles that failed.
    pub failures: usize,
    /// Concurrent workers.
    pub concurrency: usize,
    /// Wall time of the measured part.
    pub seconds: f64,
    /// Successful cycles per second of wall time.
    pub cycles_per_second: f64,
    /// Mean latency of the successful cycles.
    pub mean_micros: f64,
    /// Nearest-rank median latency of the successful cycles.
    pub p50_micros: u64,
    /// Nearest-rank 99th percentile latency of the successful cycles.
    pub p99_micros: u64,
    /// The process's user + system CPU time over the measured part,
    /// divided by the cycles run.
    pub cpu_micros_per_cycle: f64,
    /// Every successful cycle's latency, sorted, with `--latencies`
    /// (so a caller can merge runs): absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latencies_micros: Option<Vec<u64>>,
    /// How the run differed from the default (no GET stream, no pool):
    /// shown in the text line beside the mode; the JSON object keeps its
    /// fixed keys.
    #[serde(skip)]
    pub notes: Vec<&'static str>,
}

/// What the workers measured, before it is summed up.
#[derive(Debug, Default)]
pub struct Measured {
    /// Latency of each successful cycle.
    pub latencies: Vec<Duration>,
    /// How many cycles failed.
    pub failures: usize,
}

impl Report {
    /// Sums up `measured`, taken over `wall` with `cpu` of process CPU time.
    pub fn new(
        mode: &'static str,
        concurrency: usize,
        mut measured: Measured,
        wall: Duration,
        cpu: Duration,
    ) -> Self {
        measured.latencies.sort_unstable();
        let latencies = &measured.latencies;
        let cycles = latencies.len() + measured.failures;
        let seconds = wall.as_secs_f64();
        let per = |total: f64, count: usize| {
            if count == 0 {
                0.0
            } else {
                total / count as f64
            }
        };
        let total_micros: f64 = latencies.iter().map(|d| d.as_secs_f64() * 1e6).sum();
        Self {
            client: CLIENT,
            mode,
            cycles,
            failures: measured.failures,
            concurrency,
            seconds,
            cycles_per_second: if seconds > 0.0 {
                latencies.len() as f64 / seconds
            } else {
                0.0
            },
            mean_micros: per(total_micros, latencies.len()),
            p50_micros: micros(percentile(latencies, 50)),
            p99_micros: micros(percentile(latencies, 99)),
            cpu_micros_per_cycle: per(cpu.as_secs_f64() * 1e6, cycles),
            latencies_micros: None,
            notes: Vec::new(),
        }
    }

    /// Adds every latency to the JSON form.
    pub fn with_latencies(mut self, sorted: &[Duration]) -> Self {
        self.latencies_micros = Some(sorted.iter().map(|d| micros(*d)).collect());
        self
    }

    /// The one-line JSON form.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }

    /// The one-line text form.
    pub fn text(&self) -> String {
        format!(
            "{} ({}): {} cycles ({} failed) in {:.2} s: {:.1} cycles/s, mean {:.0} µs, \
             p50 {} µs, p99 {} µs, cpu {:.0} µs/cycle",
            self.client,
            [self.mode]
                .iter()
                .chain(&self.notes)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            self.cycles,
            self.failures,
            self.seconds,
            self.cycles_per_second,
            self.mean_micros,
            self.p50_micros,
            self.p99_micros,
            self.cpu_micros_per_cycle,
        )
    }
}

/// The nearest-rank `p`th percentile of `sorted` (zero when empty).
pub fn percentile(sorted: &[Duration], p: u32) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (u64::from(p) * sorted.len() as u64).div_ceil(100) as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The process's CPU time so far, user + system (`getrusage(RUSAGE_SELF)`).
pub fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `usage` is a valid place for one `rusage`, which
    // getrusage fills in whenever it returns 0.
    let usage = unsafe {
        let status = libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        assert_eq!(status, 0, "getrusage(RUSAGE_SELF) cannot fail");
        usage.assume_init()
    };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(time: libc::timeval) -> Duration {
    let seconds = u64::try_from(time.tv_sec).unwrap_or(0);
    let micros = u64::try_from(time.tv_usec).unwrap_or(0);
    Duration::from_secs(seconds) + Duration::from_micros(micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let sorted: Vec<_> = (1..=10).map(Duration::from_micros).collect();
        assert_eq!(percentile(&sorted, 50), Duration::from_micros(5));
        assert_eq!(percentile(&sorted, 99), Duration::from_micros(10));
        assert_eq!(percentile(&sorted[..1], 99), Duration::from_micros(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    #[test]
    fn json_keys_in_order() {
        let measured = Measured {
            latencies: vec![Duration::from_micros(100), Duration::from_micros(300)],
            failures: 1,
        };
        let report = Report::new(
            "borrowed",
            2,
            measured,
            Duration::from_secs(1),
            Duration::from_micros(900),
        );
        assert_eq!(
            report.json(),
            r#"{"client":"rmcp 3.11","mode":"borrowed","cycles":3,"failures":1,"concurrency":2,"seconds":1.0,"cyclesPerSecond":2.0,"meanMicros":200.0,"p50Micros":100,"p99Micros":300,"cpuMicrosPerCycle":300.0}"#
        );
    }
}
