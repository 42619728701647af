//! The HTML report opened in headless Chromium (Debian's `chromium`, installed by
//! scripts/setup-test-env): it renders to a non-blank page, every section and chart part is in the
//! DOM, and loading it sends no network request.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::servetune;

/// The section ids the report promises, in order.
const SECTIONS: [&str; 8] = ["standing", "tasks", "launch", "warnings", "results", "analysis", "next-steps", "questions"];
/// The charts of a campaign with done experiments in a probed box with a P2P matrix and a recorded
/// fabric document.
const CHARTS: [&str; 8] = ["throughput", "ttft", "tpot", "versus", "breakdown", "p2p", "fabric-bandwidth", "fabric-latency"];

fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("chromium is not installed: run scripts/setup-test-env as root (it installs Debian's chromium package)"))
}

/// Runs headless Chromium with a fresh profile and no name resolution; kills it after 90 s.
fn run_chromium(profile: &Path, args: &[String]) -> Output {
    let child = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions", "--disable-background-networking"])
        .arg("--host-resolver-rules=MAP * ~NOTFOUND")
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let pid = child.id();
    let start = Instant::now();
    let killer = std::thread::spawn(move || {
        while start.elapsed() < Duration::from_secs(90) {
            std::thread::sleep(Duration::from_millis(200));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("chromium output");
    let _ = killer.join();
    assert!(start.elapsed() < Duration::from_secs(90), "chromium did not finish within 90 s");
    out
}

/// The report of the committed KVM fixture journal with simulated fabric documents of its
/// host-staged link recorded (`campaign fabric`: a p2p sweep and an NCCL all-reduce), as HTML in
/// `tmp`.
fn report(tmp: &Path) -> PathBuf {
    let dir = tmp.join("c");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaign/tests/fixtures/report-kvm/journal.sqlite");
    std::fs::copy(fx, dir.join("journal.sqlite")).expect("copy fixture");
    let fabric = tmp.join("p2p.json");
    let out = servetune()
        .args(["fabric", "p2p", "--backend", "sim", "--sim-link", "pcie-host-staged", "--max-size", "4M", "--json"])
        .arg(&fabric)
        .output()
        .expect("fabric");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = servetune().args(["campaign", "fabric"]).arg(&dir).arg(&fabric).output().expect("campaign fabric");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // And its NCCL all-reduce.
    let allreduce = tmp.join("ar.json");
    let out =
        servetune().args(["fabric", "allreduce", "--backend", "sim", "--sim-gpus", "8", "--json"]).arg(&allreduce).output().expect("ar");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = servetune().args(["campaign", "fabric"]).arg(&dir).arg(&allreduce).output().expect("campaign fabric");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let html = tmp.join("report.html");
    let out = servetune().args(["campaign", "report"]).arg(&dir).arg("--html").arg(&html).output().expect("report");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    html
}

fn url(p: &Path) -> String {
    format!("file://{}", p.display())
}

fn screenshot(tmp: &Path, page: &Path, name: &str) -> u64 {
    let png = tmp.join(format!("{name}.png"));
    let out = run_chromium(
        &tmp.join(format!("profile-{name}")),
        &["--hide-scrollbars".into(), "--window-size=1280,2400".into(), format!("--screenshot={}", png.display()), url(page)],
    );
    assert!(png.is_file(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&png).expect("png");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    bytes.len() as u64
}

#[test]
fn html_report_screenshot_in_chromium_is_not_blank() {
    let d = tempfile::tempdir().expect("tmp");
    let html = report(d.path());
    let blank = d.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body></body></html>").expect("blank");
    let empty = screenshot(d.path(), &blank, "blank");
    let full = screenshot(d.path(), &html, "report");
    // A blank 1280x2400 page compresses to a few KB; text, tables and charts do not.
    assert!(full > 20 * empty, "report screenshot {full} bytes vs blank {empty} bytes");
}

/// Each `<svg class="chart" ...>...</svg>` of the DOM, by its data-chart name.
fn charts(dom: &str) -> Vec<(String, String)> {
    dom.split(r#"<svg class="chart""#)
        .skip(1)
        .map(|rest| {
            let body = rest.split("</svg>").next().unwrap_or("").to_string();
            let name = body.split(r#"data-chart=""#).nth(1).and_then(|s| s.split('"').next()).unwrap_or("").to_string();
            (name, body)
        })
        .collect()
}

#[test]
fn html_report_dom_has_every_section_and_each_chart_has_axes_a_series_and_a_legend() {
    let d = tempfile::tempdir().expect("tmp");
    let html = report(d.path());
    let out = run_chromium(&d.path().join("profile"), &["--dump-dom".into(), url(&html)]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("</html>"), "chromium dumped the DOM: {}", String::from_utf8_lossy(&out.stderr));
    let mut at = 0;
    for id in SECTIONS {
        let pos = dom.find(&format!(r#"<section id="{id}">"#)).unwrap_or_else(|| panic!("section {id} missing"));
        assert!(pos > at, "section {id} out of order");
        at = pos;
    }
    // The recorded all-reduce is a table of times by size.
    let ar = dom.find("Measured NCCL all-reduce").unwrap_or_else(|| panic!("no all-reduce section"));
    assert!(dom[ar..].contains("<th>8 ranks, us</th>") && dom[ar..].contains("<td>8 B</td>"), "the all-reduce table");
    let found = charts(&dom);
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, CHARTS, "the charts, in order");
    for (name, svg) in &found {
        for part in [
            r#"class="axis x""#,
            r#"class="axis y""#,
            r#"class="tick""#,
            r#"class="label""#,
            r#"class="series""#,
            r#"class="legend-entry""#,
        ] {
            assert!(svg.contains(part), "chart {name} lacks {part}");
        }
        let series = svg.split(r#"class="series""#).nth(1).unwrap_or("");
        assert!(series.contains("<polyline") || series.contains("<rect"), "chart {name} has a series with marks");
        assert!(series.contains("<title>"), "chart {name}'s marks carry their record");
        if name.starts_with("fabric-") {
            let unit = if name == "fabric-bandwidth" { " GB/s" } else { " us" };
            let legend = svg.split(r#"class="legend""#).nth(1).unwrap_or("");
            assert!(legend.contains(unit), "chart {name}'s colour scale names its unit: {legend}");
            assert!(series.contains("(fabric record 1, environment fingerprint"), "chart {name}'s cells name their fabric record");
        }
        if !svg.contains(r#"data-kind="heatmap""#) {
            let y_label = svg.split(r#"class="axis y""#).nth(1).and_then(|s| s.split(r#"class="label""#).nth(1)).unwrap_or("");
            let y_label = y_label.split("</text>").next().unwrap_or("");
            assert!(y_label.contains("(tok/s)") || y_label.contains("(ms)"), "chart {name}'s y axis has a unit: {y_label}");
        }
    }
}

/// Hosts Chromium asked for while loading `page`, from its net log.
fn hosts(tmp: &Path, page: &Path, name: &str) -> BTreeSet<String> {
    let log = tmp.join(format!("{name}.netlog.json"));
    run_chromium(&tmp.join(format!("profile-{name}")), &[format!("--log-net-log={}", log.display()), "--dump-dom".into(), url(page)]);
    let text = std::fs::read_to_string(&log).expect("net log");
    text.split(r#""url":""#)
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter_map(|u| u.strip_prefix("http://").or_else(|| u.strip_prefix("https://")))
        .map(|rest| rest.split(['/', '?', ':']).next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn html_report_makes_no_network_requests() {
    let d = tempfile::tempdir().expect("tmp");
    let html = report(d.path());
    let text = std::fs::read_to_string(&html).expect("html");
    for banned in ["<script", "<link", "<img", "<iframe", "@import", "url("] {
        assert!(!text.contains(banned), "the report holds {banned}");
    }
    for attr in ["src=\"http", "href=\"http", "src='http", "href='http"] {
        assert!(!text.contains(attr), "the report references an external resource ({attr})");
    }
    // Chromium's own background requests (updates, time) are what a blank page shows; the report
    // must add none. A page with one external image shows that the net log does catch a fetch.
    let blank = d.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body></body></html>").expect("blank");
    let control = d.path().join("control.html");
    std::fs::write(&control, r#"<!DOCTYPE html><html><body><img src="http://servetune-control.invalid/x.png"></body></html>"#)
        .expect("control");
    let own = hosts(d.path(), &blank, "blank");
    assert!(hosts(d.path(), &control, "control").contains("servetune-control.invalid"), "the net log records page fetches");
    // Background requests come and go between runs, so Chromium's own service domains are left out too.
    let chromium_services = ["google.com", "googleapis.com", "gvt1.com", "gstatic.com"];
    let extra: Vec<String> = hosts(d.path(), &html, "report")
        .difference(&own)
        .filter(|h| !chromium_services.iter().any(|s| h.as_str() == *s || h.ends_with(&format!(".{s}"))))
        .cloned()
        .collect();
    assert!(extra.is_empty(), "the report made requests to {extra:?}");
}
