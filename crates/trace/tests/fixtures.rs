
/// A small xorshift: the scrambles below are reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn scrambled_engine_traces_analyse_to_finite_figures() {
    // Events out of order, some dropped, annotations and launches moved: the analysis may find
    // other steps, but never panics and never reports a figure that is not a number.
    let dir = tempfile::tempdir().expect("tmp");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (round, engine) in [Engine::SglangCuda, Engine::VllmPiecewise, Engine::TrtLlm, Engine::SglangRocm].into_iter().cycle().take(12).enumerate() {
        let mut spec = Spec::typical(engine);
        spec.layers = 2;
        spec.annotations = [Annotations::HostAndGpu, Annotations::Host, Annotations::None, Annotations::PythonFrames][round % 4];
        let (mut doc, _) = synth::draw(&spec);
        let events = doc["traceEvents"].as_array_mut().expect("events");
        for _ in 0..events.len() / 4 {
            let (a, b) = (rng.below(events.len()), rng.below(events.len()));
            events.swap(a, b);
        }
        let n = events.len();
        for _ in 0..n / 10 {
            let i = rng.below(events.len());
            match rng.below(4) {
                0 => {
                    events.remove(i);
                }
                1 => events[i]["ts"] = serde_json::json!(events[i]["ts"].as_f64().unwrap_or(0.0) - rng.below(5000) as f64),
                2 => events[i]["dur"] = serde_json::json!(rng.below(100_000) as f64),
                _ => events[i]["args"]["correlation"] = serde_json::json!(rng.below(3000)),
            }
        }
        let path = dir.path().join(format!("scrambled{round}.json"));
        synth::write_doc(&doc, &path).expect("writes");
        let r = analyze(&path, 1.0).expect("analyses");
        let mut figures: Vec<f64> = vec![r.kernel_ms, r.busy_ms, r.span_ms, r.other_pct];
        for p in &r.phases {
            figures.extend([p.median_ms, p.p90_ms, p.mean_ms, p.idle_ms, p.idle_pct, p.overlap_ms, p.allreduce_calls_per_step]);
            figures.extend(p.tokens_per_step.into_iter().chain(p.requests_per_step).chain(p.us_per_token));
            figures.extend(p.categories.iter().flat_map(|c| [c.ms, c.pct].into_iter().chain(c.us_per_token)));
        }
        for s in &r.steps {
            figures.extend([s.start_ms, s.ms, s.busy_ms, s.idle_ms]);
            figures.extend(s.categories.iter().map(|c| c.ms));
        }
        assert!(figures.iter().all(|f| f.is_finite()), "round {round}: {figures:?}");
        assert!(r.steps.windows(2).all(|w| w[0].start_ms <= w[1].start_ms), "round {round}: steps out of order");
    }
}
