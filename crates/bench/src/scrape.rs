//! Server-side metrics: parse the Prometheus text format, recognise sglang's and vLLM's names,
//! scrape them about once a second during a run, and summarise the series in words.

use std::time::{Duration, Instant};

use serde::Serialize;

/// Whose metric names an exposition uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsStyle {
    /// `sglang:*` names.
    Sglang,
    /// `vllm:*` names.
    Vllm,
}

/// One scrape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Sample {
    /// Seconds since the run's start.
    pub t_s: f64,
    /// Requests the server is running.
    pub running: Option<f64>,
    /// Requests waiting in the server's queue.
    pub queued: Option<f64>,
    /// KV-cache usage as a fraction (0..1).
    pub kv_usage: Option<f64>,
    /// Cumulative preemptions (vLLM) or retractions (sglang).
    pub preemptions: Option<f64>,
    /// The server's own generation throughput gauge, tokens/s (sglang).
    pub gen_throughput: Option<f64>,
}

/// The series scraped during one run and what they say.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerMetrics {
    /// The scraped URL (no userinfo).
    pub url: String,
    /// Whose names were seen; `null` when none was recognised (or nothing was scraped).
    pub style: Option<MetricsStyle>,
    /// Every completed scrape, in time order.
    pub samples: Vec<Sample>,
    /// Scrapes that failed or timed out (`--scrape-timeout`).
    pub failed_scrapes: u64,
    /// The most requests running at once, over the samples.
    pub max_running: Option<f64>,
    /// The longest server queue, over the samples.
    pub max_queued: Option<f64>,
    /// The highest KV-cache usage (0..1), over the samples.
    pub max_kv_usage: Option<f64>,
    /// Preemptions between the first and last sample.
    pub preemptions: Option<f64>,
    /// Observations in words.
    pub summary: Vec<String>,
}

/// The fields of a [`Sample`] a metric name fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Running,
    Queued,
    Kv,
    Preemptions,
    GenThroughput,
}

/// The recognised names: (field, sglang names, vLLM names).
const NAMES: &[(Field, &[&str], &[&str])] = &[
    (Field::Running, &["sglang:num_running_reqs"], &["vllm:num_requests_running"]),
    (Field::Queued, &["sglang:num_queue_reqs"], &["vllm:num_requests_waiting"]),
    (Field::Kv, &["sglang:token_usage"], &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]),
    (
        Field::Preemptions,
        &["sglang:num_retracted_reqs_total", "sglang:num_retracted_requests_total", "sglang:num_retracted_reqs"],
        &["vllm:num_preemptions_total", "vllm:num_preemptions"],
    ),
    (Field::GenThroughput, &["sglang:gen_throughput"], &[]),
];

/// Parses one exposition; returns the sample (without time) and the style detected.
pub fn parse(text: &str) -> (Sample, Option<MetricsStyle>) {
    let mut s = Sample::default();
    let mut style = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let rest = &line[name_end..];
        let value_part = match rest.rfind('}') {
            Some(i) => &rest[i + 1..],
            None => rest,
        };
        let Some(v) = value_part.split_whitespace().next().and_then(|x| x.parse::<f64>().ok()) else {
            continue;
        };
        if !v.is_finite() {
            continue;
        }
        for (field, sg, vl) in NAMES {
            let is_sg = sg.contains(&name);
            let is_vl = vl.contains(&name);
            if !(is_sg || is_vl) {
                continue;
            }
            style = Some(if is_sg { MetricsStyle::Sglang } else { MetricsStyle::Vllm });
            let slot = match *field {
                Field::Running => &mut s.running,
                Field::Queued => &mut s.queued,
                Field::Kv => &mut s.kv_usage,
                Field::Preemptions => &mut s.preemptions,
                Field::GenThroughput => &mut s.gen_throughput,
            };
            // Several label sets (engines, models) add up; usage fractions take the max.
            *slot = Some(match (*slot, *field) {
                (Some(old), Field::Kv) => old.max(v),
                (Some(old), _) => old + v,
                (None, _) => v,
            });
        }
    }
    (s, style)
}

/// The fewest scrapes whose maxima the summary calls the server's peaks (and from which it names a
/// running-request cap): with one or two, a scrape before the first request or during the drain
/// would read as the whole run.
pub const MIN_SAMPLES_FOR_PEAKS: usize = 3;

fn max_of(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    samples.iter().filter_map(f).fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

impl ServerMetrics {
    /// Summarises `samples` against the client's target concurrency (`None` for an open loop).
    pub fn new(url: String, style: Option<MetricsStyle>, scraped: Scraped, client_target: Option<f64>) -> Self {
        let Scraped { samples, failed } = scraped;
        let max_running = max_of(&samples, |s| s.running);
        let max_queued = max_of(&samples, |s| s.queued);
        let max_kv_usage = max_of(&samples, |s| s.kv_usage);
        let preemptions = match (samples.iter().find_map(|s| s.preemptions), samples.iter().rev().find_map(|s| s.preemptions)) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        let mut summary = Vec::new();
        if samples.is_empty() {
            summary.push(format!(
                "nothing was scraped ({failed} scrape(s) failed or none finished before the run ended): no server-side numbers for this run"
            ));
        } else if samples.len() < MIN_SAMPLES_FOR_PEAKS {
            // One scrape may come before the first request or during the drain: its numbers are
            // not the run's peaks, and no limit is named from them.
            let seen: Vec<String> = [("running", max_running), ("queued", max_queued)]
                .iter()
                .filter_map(|(what, v)| v.map(|v| format!("{what} {v:.0}")))
                .chain(max_kv_usage.map(|k| format!("KV cache {:.0}%", k * 100.0)))
                .collect();
            summary.push(format!(
                "only {} scrape{} during the run, too few to see the server's peaks (a longer run, or a shorter --scrape-interval, gives more){}",
                samples.len(),
                if samples.len() == 1 { "" } else { "s" },
                if seen.is_empty() { String::new() } else { format!("; seen: {}", seen.join(", ")) }
            ));
        } else if let (Some(r), Some(q)) = (max_running, max_queued) {
            let below_target = client_target.is_none_or(|t| r + 0.5 < t);
            if q >= 1.0 && below_target {
                summary.push(format!(
                    "running requests never exceeded {r:.0} while up to {q:.0} waited in the server's queue: the server's max-running-requests limit (or its KV capacity) caps concurrency at {r:.0}"
                ));
            } else {
                summary.push(format!("running requests peaked at {r:.0}; the server queue peaked at {q:.0}"));
            }
        } else if let Some(r) = max_running {
            summary.push(format!("running requests peaked at {r:.0}"));
        }
        if let Some(k) = max_kv_usage.filter(|_| samples.len() >= MIN_SAMPLES_FOR_PEAKS) {
            if k >= 0.95 {
                summary.push(format!(
                    "the KV cache reached {:.0}% of capacity: KV memory limits the batch; new requests wait or preempt others",
                    k * 100.0
                ));
            } else {
                summary.push(format!("KV-cache usage peaked at {:.0}%", k * 100.0));
            }
        }
        if let Some(p) = preemptions {
            if p > 0.0 {
                summary.push(format!("{p:.0} preemptions during the run: requests were evicted from the KV cache and recomputed"));
            }
        }
        Self { url, style, samples, failed_scrapes: failed, max_running, max_queued, max_kv_usage, preemptions, summary }
    }
}

/// What a scrape loop collected.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scraped {
    /// Completed scrapes.
    pub samples: Vec<Sample>,
    /// Scrapes that failed, timed out or got a status other than 200.
    pub failed: u64,
}

/// Scrapes `url` every `interval` (each scrape bounded by the client's scrape limit) until `stop`
/// turns true; returns the samples and the style seen.
pub async fn scrape_loop(
    client: crate::client::HttpClient,
    url: String,
    interval: Duration,
    t0: Instant,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (Scraped, Option<MetricsStyle>) {
    let mut out = Scraped::default();
    let mut style = None;
    let limit = client.limits().scrape;
    let mut next = tokio::time::Instant::now();
    loop {
        let scrape = client.simple(http::Method::GET, &url, bytes::Bytes::new(), limit);
        let r = tokio::select! {
            r = scrape => r,
            _ = stop.wait_for(|v| *v) => break,
        };
        match r {
            Ok(r) if r.status == 200 => {
                let (mut s, st) = parse(&String::from_utf8_lossy(&r.body));
                s.t_s = t0.elapsed().as_secs_f64();
                style = style.or(st);
                out.samples.push(s);
            }
            _ => out.failed += 1,
        }
        next = next.checked_add(interval).unwrap_or(next);
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = stop.wait_for(|v| *v) => break,
        }
    }
    (out, style)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_names_are_recognised_and_label_sets_add_up() {
        let text = "# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\n\
            sglang:num_running_reqs{model_name=\"a\",tp_rank=\"0\"} 30\n\
            sglang:num_running_reqs{model_name=\"a\",tp_rank=\"1\"} 34\n\
            sglang:num_queue_reqs{model_name=\"a\"} 12.0\nsglang:token_usage{model_name=\"a\"} 0.97\n\
            sglang:gen_throughput{model_name=\"a\"} 480.5\n";
        let (s, style) = parse(text);
        assert_eq!(style, Some(MetricsStyle::Sglang));
        assert_eq!(s.running, Some(64.0));
        assert_eq!(s.queued, Some(12.0));
        assert_eq!(s.kv_usage, Some(0.97));
        assert_eq!(s.gen_throughput, Some(480.5));
    }

    #[test]
    fn vllm_names_are_recognised() {
        let (s, style) = parse("vllm:num_requests_running{model_name=\"m\"} 8\nvllm:num_requests_waiting{model_name=\"m\"} 0\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\nvllm:num_preemptions_total{model_name=\"m\"} 3\n");
        assert_eq!(style, Some(MetricsStyle::Vllm));
        assert_eq!((s.running, s.queued, s.kv_usage, s.preemptions), (Some(8.0), Some(0.0), Some(0.5), Some(3.0)));
    }

    #[test]
    fn a_capped_server_is_named_as_the_limit() {
        let samples = vec![
            Sample { t_s: 1.0, running: Some(64.0), queued: Some(60.0), ..Default::default() },
            Sample { t_s: 2.0, running: Some(64.0), queued: Some(64.0), ..Default::default() },
            Sample { t_s: 3.0, running: Some(64.0), queued: Some(62.0), ..Default::default() },
        ];
        let m = ServerMetrics::new("u".into(), Some(MetricsStyle::Sglang), Scraped { samples: samples.clone(), failed: 0 }, Some(128.0));
        assert!(m.summary[0].contains("never exceeded 64"), "{:?}", m.summary);
        assert!(m.summary[0].contains("caps concurrency"), "{:?}", m.summary);
        // Two scrapes are too few to name a cap, or a peak.
        let m =
            ServerMetrics::new("u".into(), Some(MetricsStyle::Sglang), Scraped { samples: samples[..2].to_vec(), failed: 0 }, Some(128.0));
        assert!(m.summary[0].starts_with("only 2 scrapes during the run, too few"), "{:?}", m.summary);
        assert!(m.summary[0].ends_with("seen: running 64, queued 64"), "{:?}", m.summary);
        assert!(!m.summary.iter().any(|s| s.contains("caps") || s.contains("peaked")), "{:?}", m.summary);
    }

    #[test]
    fn one_scrape_before_the_load_is_not_called_a_peak_of_zero() {
        let samples = vec![Sample { t_s: 0.0005, running: Some(0.0), queued: Some(0.0), kv_usage: Some(0.0), ..Default::default() }];
        let m = ServerMetrics::new("u".into(), Some(MetricsStyle::Sglang), Scraped { samples, failed: 0 }, Some(4.0));
        assert_eq!(m.summary.len(), 1, "{:?}", m.summary);
        assert!(m.summary[0].starts_with("only 1 scrape during the run"), "{:?}", m.summary);
        assert!(!m.summary[0].contains("peaked"), "{:?}", m.summary);
    }

    #[test]
    fn an_uncapped_server_is_not_blamed() {
        let samples = vec![Sample { t_s: 1.0, running: Some(8.0), queued: Some(0.0), ..Default::default() }];
        let m = ServerMetrics::new("u".into(), Some(MetricsStyle::Vllm), Scraped { samples, failed: 0 }, Some(8.0));
        assert!(!m.summary[0].contains("caps"), "{:?}", m.summary);
    }

    #[test]
    fn a_run_with_no_scrape_says_nothing_was_scraped_not_peaked_at_zero() {
        let m = ServerMetrics::new("u".into(), None, Scraped { samples: vec![], failed: 0 }, Some(8.0));
        assert!(m.summary.iter().any(|s| s.contains("nothing was scraped")), "{:?}", m.summary);
        assert!(!m.summary.iter().any(|s| s.contains("peaked")), "{:?}", m.summary);
    }

    #[test]
    fn garbage_lines_are_skipped() {
        let (s, _) = parse("sglang:num_running_reqs{a=\"}\"} notanumber\n{{{\n sglang:num_queue_reqs 4\n");
        assert_eq!(s.queued, Some(4.0));
    }
}
