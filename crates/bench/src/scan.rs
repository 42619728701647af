//! A one-pass reader of OpenAI stream events that allocates nothing and builds no tree: the token
//! events that make up almost all of a stream cost one walk over their bytes.
//!
//! It answers only where it is sure to agree with the full parser ([`crate::api::parse_event_with`]):
//! a string with an escape in it, an error payload, a field given twice, a count that is not a
//! plain integer, JSON nested deeper than [`MAX_DEPTH`] or anything malformed makes it answer
//! `None`, and the full parser decides (and words the error). Tests check the two agree.

use crate::api::EventInfo;

/// Nesting deeper than this is left to the full parser (its own limit is 128).
const MAX_DEPTH: u32 = 64;

/// Reads one OpenAI completions or chat event (without its text: the caller keeps no text).
/// `None` when the full parser must decide.
pub fn openai_event(data: &str) -> Option<EventInfo> {
    let mut s = Scan { b: data.as_bytes(), i: 0, depth: 0 };
    let mut info = EventInfo::default();
    s.object(&[b"choices", b"usage", b"error", b"object", b"message"], |s, key| match key {
        Some(0) => s.choices(&mut info),
        Some(1) => s.usage(&mut info),
        // A non-null error payload: the full parser words it.
        Some(2) => s.null(),
        Some(3) => match s.string_or_null()? {
            Some(b"error") => None,
            _ => Some(()),
        },
        Some(4) => s.string_or_null().map(drop),
        _ => s.skip(),
    })?;
    s.ws();
    (s.i == s.b.len()).then_some(info)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    /// An object: `f` reads each value, told which of `known` its key is (`None`: another key).
    /// A known key given twice is left to the full parser (which refuses it).
    fn object(&mut self, known: &[&[u8]], mut f: impl FnMut(&mut Self, Option<usize>) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let mut seen = 0u64;
        if !self.eat(b'}') {
            loop {
                if self.peek() != Some(b'"') {
                    return None;
                }
                let key = self.string()?;
                self.expect(b':')?;
                let k = known.iter().position(|k| *k == key);
                if let Some(k) = k {
                    if seen & (1 << k) != 0 {
                        return None;
                    }
                    seen |= 1 << k;
                }
                f(self, k)?;
                if self.eat(b',') {
                    continue;
                }
                self.expect(b'}')?;
                break;
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// A string without escapes (the bytes between its quotes); `None` for one with an escape
    /// or a raw control character.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.i;
        let len = self.b[start..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if self.b[start + len] != b'"' {
            return None;
        }
        self.i = start + len + 1;
        Some(&self.b[start..start + len])
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.ws();
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    fn null(&mut self) -> Option<()> {
        self.literal(b"null")
    }

    fn string_or_null(&mut self) -> Option<Option<&'a [u8]>> {
        match self.peek()? {
            b'n' => self.null().map(|()| None),
            _ => self.string().map(Some),
        }
    }

    /// A plain non-negative integer that fits a u64, or null.
    fn count_or_null(&mut self) -> Option<Option<u64>> {
        if self.peek()? == b'n' {
            return self.null().map(|()| None);
        }
        let start = self.i;
        let len = self.b[start..].iter().position(|c| !c.is_ascii_digit()).unwrap_or(self.b.len() - start);
        let digits = &self.b[start..start + len];
        // A fraction, an exponent or a leading zero: the full parser's call.
        if len == 0 || (len > 1 && digits[0] == b'0') || matches!(self.b.get(start + len), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.i = start + len;
        std::str::from_utf8(digits).ok()?.parse().ok().map(Some)
    }

    /// A JSON number (checked, not converted).
    fn number(&mut self) -> Option<()> {
        let digits = |s: &mut Self| {
            let n = s.b[s.i..].iter().take_while(|c| c.is_ascii_digit()).count();
            s.i += n;
            n
        };
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            (digits(self) > 0).then_some(())?;
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            (digits(self) > 0).then_some(())?;
        }
        Some(())
    }

    /// Any JSON value, checked and passed over.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(&[], |s, _| s.skip()),
            b'[' => self.array(|s| s.skip()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.null(),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn array(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        if !self.eat(b']') {
            loop {
                f(self)?;
                if self.eat(b',') {
                    continue;
                }
                self.expect(b']')?;
                break;
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// `choices`: an array of choice objects (null is the full parser's error to word).
    fn choices(&mut self, info: &mut EventInfo) -> Option<()> {
        self.array(|s| {
            s.object(&[b"text", b"delta", b"message", b"finish_reason"], |s, key| match key {
                Some(0) => {
                    if s.string_or_null()?.is_some_and(|t| !t.is_empty()) {
                        info.has_token = true;
                        info.has_content = true;
                    }
                    Some(())
                }
                Some(1 | 2) => s.delta(info),
                Some(3) => {
                    if let Some(f) = s.string_or_null()? {
                        info.finish_reason = Some(std::str::from_utf8(f).ok()?.to_string());
                    }
                    Some(())
                }
                _ => s.skip(),
            })
        })
    }

    /// A chat `delta` or `message`: content, or reasoning only.
    fn delta(&mut self, info: &mut EventInfo) -> Option<()> {
        if self.peek()? == b'n' {
            return self.null();
        }
        self.object(&[b"content", b"reasoning_content", b"reasoning"], |s, key| match key {
            Some(k) => {
                if s.string_or_null()?.is_some_and(|t| !t.is_empty()) {
                    info.has_token = true;
                    info.has_content |= k == 0;
                }
                Some(())
            }
            None => s.skip(),
        })
    }

    fn usage(&mut self, info: &mut EventInfo) -> Option<()> {
        if self.peek()? == b'n' {
            return self.null();
        }
        let (mut prompt, mut completion) = (None, None);
        self.object(&[b"prompt_tokens", b"completion_tokens"], |s, key| match key {
            Some(0) => s.count_or_null().map(|c| prompt = c),
            Some(1) => s.count_or_null().map(|c| completion = c),
            _ => s.skip(),
        })?;
        info.prompt_tokens = prompt;
        info.usage_completion_tokens = completion;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{parse_event_with, Api};
    use proptest::prelude::*;

    /// Events as servers send them, and shapes the scan must leave to the full parser.
    const EVENTS: &[&str] = &[
        r#"{"choices":[{"index":0,"text":" tok","finish_reason":null}]}"#,
        r#"{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#,
        r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":128,"total_tokens":144}}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"hmm","content":null}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"so"}}]}"#,
        r#"{"choices":[{"message":{"content":"whole answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        r#" { "choices" : [ { "text" : "x" } ] , "extra" : [1, -2.5e3, true, false, null, {"a":[{}]}] } "#,
        r#"{"choices":[{"text":"a\"b"}]}"#,
        r#"{"choices":[{"text":"\u00e9"}]}"#,
        r#"{"error":{"message":"boom"}}"#,
        r#"{"error":null,"choices":[{"text":"ok"}]}"#,
        r#"{"object":"error","message":"bad request"}"#,
        r#"{"choices":[{"text":"a","text":"b"}]}"#,
        r#"{"choices":null}"#,
        r#"{"choices":[{"text":5}]}"#,
        r#"{"usage":{"completion_tokens":1.5}}"#,
        r#"{"usage":{"completion_tokens":-1}}"#,
        r#"{"usage":{"completion_tokens":1e2}}"#,
        r#"{"usage":{"completion_tokens":99999999999999999999999}}"#,
        r#"{"usage":{"completion_tokens":007}}"#,
        r#"{"choices":[{"text":"a"}]} trailing"#,
        r#"{"choices":[{"text":"a"}],}"#,
        r#"{"choices":[{"text":"a"}]"#,
        r#"{"x":01}"#,
        r#"{"x":-}"#,
        r#"{"x":1.}"#,
        r#"[1,2]"#,
        "",
        r#"{"choices":[{"delta":[]}]}"#,
        r#"{"choices":[{"finish_reason":"stop"},{"finish_reason":"length","text":"z"}]}"#,
    ];

    /// Where the scan answers, it answers as the full parser does; where it does not, the full
    /// parser is the one that decides.
    fn agrees(data: &str) -> Result<(), String> {
        let full = parse_event_with(Api::OpenaiCompletions, data, false);
        match openai_event(data) {
            Some(fast) => {
                let full = full.map_err(|e| format!("the scan read {data:?} the full parser refuses: {e}"))?;
                if fast != full {
                    return Err(format!("{data:?}: scan {fast:?} != full {full:?}"));
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    #[test]
    fn the_scan_agrees_with_the_full_parser_on_every_sample_event() {
        for e in EVENTS {
            agrees(e).unwrap_or_else(|m| panic!("{m}"));
        }
    }

    #[test]
    fn the_scan_reads_the_events_servers_stream_and_leaves_escapes_and_errors_alone() {
        for read in &EVENTS[..10] {
            assert!(openai_event(read).is_some(), "the scan should read {read}");
        }
        for left in &EVENTS[10..13] {
            assert_eq!(openai_event(left), None, "{left} is for the full parser");
        }
        let token = openai_event(EVENTS[0]).expect("token event");
        assert!(token.has_token && token.has_content);
        let usage = openai_event(EVENTS[3]).expect("usage event");
        assert_eq!((usage.prompt_tokens, usage.usage_completion_tokens, usage.has_token), (Some(16), Some(128), false));
        let reasoning = openai_event(EVENTS[6]).expect("reasoning event");
        assert!(reasoning.has_token && !reasoning.has_content);
    }

    proptest! {
        /// Pieces of events glued at random: valid or not, the scan never disagrees.
        #[test]
        fn the_scan_agrees_with_the_full_parser_on_spliced_events(picks in prop::collection::vec((0usize..33, 0usize..200, 0usize..200), 1..4)) {
            let mut data = String::new();
            for (e, a, b) in picks {
                let src = EVENTS[e % EVENTS.len()];
                let (a, b) = (a.min(src.len()), b.min(src.len()));
                let (a, b) = (a.min(b), a.max(b));
                if src.is_char_boundary(a) && src.is_char_boundary(b) {
                    data.push_str(&src[a..b]);
                }
            }
            let verdict = agrees(&data);
            prop_assert!(verdict.is_ok(), "{:?}", verdict);
        }
    }
}
