//! Property tests of the SSE parser: any split of a valid stream gives the same events.

use proptest::prelude::*;
use servetune_bench::sse::{SseEvent, SseParser};

#[derive(Debug, Clone)]
struct Ev {
    event: Option<String>,
    data: Vec<String>,
    comment_before: bool,
}

fn ev() -> impl Strategy<Value = Ev> {
    (
        proptest::option::of("[a-z]{1,8}"),
        proptest::collection::vec("[ -9;-~]{0,20}", 1..4), // printable ASCII without ':' at the start issue
        any::<bool>(),
    )
        .prop_map(|(event, data, comment_before)| Ev { event, data, comment_before })
}

fn encode(evs: &[Ev], eol: &str, done: bool) -> Vec<u8> {
    let mut s = String::new();
    for e in evs {
        if e.comment_before {
            s.push_str(": keep-alive");
            s.push_str(eol);
            s.push_str(eol);
        }
        if let Some(name) = &e.event {
            s.push_str("event: ");
            s.push_str(name);
            s.push_str(eol);
        }
        for d in &e.data {
            s.push_str("data: ");
            s.push_str(d);
            s.push_str(eol);
        }
        s.push_str(eol);
    }
    if done {
        s.push_str("data: [DONE]");
        s.push_str(eol);
        s.push_str(eol);
    }
    s.into_bytes()
}

fn expected(evs: &[Ev], done: bool) -> Vec<SseEvent> {
    let mut out: Vec<SseEvent> =
        evs.iter().map(|e| SseEvent { event: e.event.clone().unwrap_or_default(), data: e.data.join("\n") }).collect();
    if done {
        out.push(SseEvent { event: String::new(), data: "[DONE]".into() });
    }
    out
}

fn parse_split(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
    let mut p = SseParser::default();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    for c in cuts {
        p.feed(&bytes[pos..c.max(pos)], &mut |e| out.push(e)).expect("feed");
        pos = c.max(pos);
    }
    p.feed(&bytes[pos..], &mut |e| out.push(e)).expect("feed");
    p.finish(&mut |e| out.push(e)).expect("finish");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_split_gives_the_same_events(
        evs in proptest::collection::vec(ev(), 0..8),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        done in any::<bool>(),
        cuts in proptest::collection::vec(0usize..10_000, 0..12),
    ) {
        let bytes = encode(&evs, eol, done);
        let got = parse_split(&bytes, &cuts);
        prop_assert_eq!(got, expected(&evs, done));
    }

    #[test]
    fn merged_frames_equal_byte_by_byte_feeding(evs in proptest::collection::vec(ev(), 1..6)) {
        let bytes = encode(&evs, "\r\n", true);
        let all_cuts: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(parse_split(&bytes, &[]), parse_split(&bytes, &all_cuts));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), cuts in proptest::collection::vec(0usize..600, 0..6)) {
        let mut p = SseParser::new(256);
        let mut pos = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        for c in cuts {
            let _ = p.feed(&bytes[pos..c.max(pos)], &mut |_| {});
            pos = c.max(pos);
        }
        let _ = p.feed(&bytes[pos..], &mut |_| {});
        let _ = p.finish(&mut |_| {});
    }
}
