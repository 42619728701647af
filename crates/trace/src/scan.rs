//! A small streaming scanner over a Chrome-trace document: it walks the top level byte by byte,
//! skips every value but `traceEvents`, and hands each event object of that array to serde as
//! one slice. Parsing slices (not an `io::Read`) lets event names borrow from the buffer, so only
//! new kernel names allocate; memory stays at one read chunk plus one event.

use std::io::{self, Read};

/// Why a document could not be scanned.
#[derive(Debug)]
pub enum ScanError {
    /// The reader failed (a corrupt or truncated gzip stream, a read error).
    Io(io::Error),
    /// The document ends before its last value closes.
    Eof,
    /// Something that is not JSON where JSON was expected, with the byte offset.
    Syntax(String),
    /// One value kept whole (an event, a key) is larger than [`MAX_VALUE`], with the byte offset.
    TooLarge(String),
}

/// The most one `traceEvents` entry (or one key) may hold. A Kineto event is well under a KB
/// (a Python function event with its arguments a few KB); an entry of megabytes is a hostile or
/// broken document, and holding it would take its size in memory.
pub const MAX_VALUE: usize = 1 << 20;

const CHUNK: usize = 1 << 20;

/// What the scanner found at the top level.
#[derive(Debug, Clone, Copy, Default)]
pub struct Found {
    /// Events handed out.
    pub events: u64,
    /// Whether a `traceEvents` array (or a top-level array) was there.
    pub had_events: bool,
}

struct Scanner<R> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Bytes consumed before `buf[0]`, for error offsets.
    base: u64,
}

impl<R: Read> Scanner<R> {
    fn refill(&mut self) -> Result<bool, ScanError> {
        self.base += self.end as u64;
        self.pos = 0;
        self.end = loop {
            match self.r.read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ScanError::Io(e)),
            }
        };
        Ok(self.end > 0)
    }

    fn peek(&mut self) -> Result<u8, ScanError> {
        if self.pos == self.end && !self.refill()? {
            return Err(ScanError::Eof);
        }
        Ok(self.buf[self.pos])
    }

    fn bump(&mut self) -> Result<u8, ScanError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    /// The next byte that is not white space (not consumed).
    fn peek_token(&mut self) -> Result<u8, ScanError> {
        loop {
            let b = self.peek()?;
            if !b.is_ascii_whitespace() {
                return Ok(b);
            }
            self.pos += 1;
        }
    }

    fn expect(&mut self, want: u8) -> Result<(), ScanError> {
        let got = self.peek_token()?;
        if got != want {
            return Err(self.syntax(&format!("expected '{}', found '{}'", want as char, got.escape_ascii())));
        }
        self.pos += 1;
        Ok(())
    }

    fn syntax(&self, what: &str) -> ScanError {
        ScanError::Syntax(format!("{what} at byte {}", self.base + self.pos as u64))
    }

    /// Copies one whole value starting at the cursor into `out` (or skips it when `out` is None):
    /// strings, nesting and escapes tracked, content left to serde.
    fn value(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<(), ScanError> {
        let first = self.peek_token()?;
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        let (mut depth, mut in_str, mut esc) = (0u32, false, false);
        let mut started = false;
        loop {
            if self.pos == self.end && !self.refill()? {
                return if scalar && started { Ok(()) } else { Err(ScanError::Eof) };
            }
            let chunk = &self.buf[self.pos..self.end];
            let mut done = None;
            for (i, &b) in chunk.iter().enumerate() {
                if in_str {
                    if esc {
                        esc = false;
                    } else if b == b'\\' {
                        esc = true;
                    } else if b == b'"' {
                        in_str = false;
                        if depth == 0 {
                            done = Some(i + 1);
                            break;
                        }
                    }
                    continue;
                }
                if scalar {
                    if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                        done = Some(i);
                        break;
                    }
                    started = true;
                    continue;
                }
                match b {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            done = Some(i + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let take = done.unwrap_or(chunk.len());
            if let Some(o) = out.as_deref_mut() {
                if o.len() + take > MAX_VALUE {
                    let at = self.base + self.pos as u64 - o.len() as u64;
                    return Err(ScanError::TooLarge(format!(
                        "the value starting at byte {at} is larger than {} MiB, the most one traceEvents entry may hold",
                        MAX_VALUE >> 20
                    )));
                }
                o.extend_from_slice(&chunk[..take]);
            }
            self.pos += take;
            if done.is_some() {
                return Ok(());
            }
        }
    }

    /// A key string at the cursor, raw (escapes left in: keys compared are plain ASCII).
    fn key(&mut self) -> Result<Vec<u8>, ScanError> {
        if self.peek_token()? != b'"' {
            return Err(self.syntax("expected a key string"));
        }
        let mut k = Vec::new();
        self.value(Some(&mut k))?;
        Ok(k)
    }
}

/// Scans `r`, calling `event` with the bytes of each `traceEvents` element.
pub fn scan(r: impl Read, event: &mut dyn FnMut(&[u8]) -> Result<(), ScanError>) -> Result<Found, ScanError> {
    let mut s = Scanner { r, buf: vec![0; CHUNK], pos: 0, end: 0, base: 0 };
    let mut found = Found::default();
    match s.peek_token()? {
        b'[' => events(&mut s, event, &mut found)?,
        b'{' => {
            s.pos += 1;
            if s.peek_token()? == b'}' {
                s.pos += 1;
            } else {
                loop {
                    let k = s.key()?;
                    s.expect(b':')?;
                    if k == b"\"traceEvents\"" && s.peek_token()? == b'[' {
                        events(&mut s, event, &mut found)?;
                    } else {
                        s.value(None)?;
                    }
                    match s.bump_token()? {
                        b',' => continue,
                        b'}' => break,
                        b => return Err(s.syntax(&format!("expected ',' or '}}' after a value, found '{}'", b.escape_ascii()))),
                    }
                }
            }
        }
        b => return Err(s.syntax(&format!("expected '{{' or '[' to open the document, found '{}'", b.escape_ascii()))),
    }
    match s.peek_token() {
        Err(ScanError::Eof) => Ok(found),
        Err(e) => Err(e),
        Ok(b) => Err(s.syntax(&format!("unexpected '{}' after the document", b.escape_ascii()))),
    }
}

impl<R: Read> Scanner<R> {
    fn bump_token(&mut self) -> Result<u8, ScanError> {
        self.peek_token()?;
        self.bump()
    }
}

fn events(s: &mut Scanner<impl Read>, event: &mut dyn FnMut(&[u8]) -> Result<(), ScanError>, found: &mut Found) -> Result<(), ScanError> {
    found.had_events = true;
    s.expect(b'[')?;
    if s.peek_token()? == b']' {
        s.pos += 1;
        return Ok(());
    }
    let mut elem = Vec::with_capacity(1024);
    loop {
        elem.clear();
        s.value(Some(&mut elem))?;
        found.events += 1;
        event(&elem)?;
        match s.bump_token()? {
            b',' => continue,
            b']' => return Ok(()),
            b => return Err(s.syntax(&format!("expected ',' or ']' in traceEvents, found '{}'", b.escape_ascii()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(doc: &[u8]) -> Result<(Found, Vec<String>), ScanError> {
        let mut seen = Vec::new();
        let f = scan(doc, &mut |e| {
            seen.push(String::from_utf8_lossy(e).into_owned());
            Ok(())
        })?;
        Ok((f, seen))
    }

    #[test]
    fn hands_out_each_event_and_skips_other_keys_with_tricky_strings() {
        let doc = br#" {"a": "x}]\"{", "b": [1, {"c": [2]}], "n": -1.5e3, "traceEvents": [ {"name": "k}\"", "ts": 1}, {"x": [1,{}]} ], "z": null} "#;
        let (f, seen) = all(doc).expect("scans");
        assert!(f.had_events);
        assert_eq!(seen, [r#"{"name": "k}\"", "ts": 1}"#, r#"{"x": [1,{}]}"#]);
    }

    #[test]
    fn a_top_level_array_is_the_events() {
        let (f, seen) = all(br#"[{"a":1},{"b":2}]"#).expect("scans");
        assert!(f.had_events && seen.len() == 2);
    }

    #[test]
    fn an_event_split_across_reads_is_whole() {
        struct Drip<'a>(&'a [u8]);
        impl Read for Drip<'_> {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(3).min(b.len());
                b[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut seen = Vec::new();
        scan(Drip(br#"{"traceEvents":[{"name":"a\"b","ts":12.5},{"k":[1,2,3]}]}"#), &mut |e| {
            seen.push(e.to_vec());
            Ok(())
        })
        .expect("scans");
        assert_eq!(seen, [br#"{"name":"a\"b","ts":12.5}"#.to_vec(), br#"{"k":[1,2,3]}"#.to_vec()]);
    }

    #[test]
    fn an_event_larger_than_the_value_limit_is_refused_not_held() {
        let mut doc = br#"{"traceEvents":[{"ph":"X","name":""#.to_vec();
        doc.resize(doc.len() + MAX_VALUE + 10, b'a');
        doc.extend_from_slice(br#""}]}"#);
        let e = all(&doc).expect_err("too large");
        assert!(matches!(&e, ScanError::TooLarge(m) if m.contains("starting at byte 16 is larger than 1 MiB")), "{e:?}");
        // A value that is only skipped (not an event) is not held, so it has no limit.
        let mut doc = br#"{"other":""#.to_vec();
        doc.resize(doc.len() + MAX_VALUE + 10, b'a');
        doc.extend_from_slice(br#"","traceEvents":[{"a":1}]}"#);
        assert_eq!(all(&doc).expect("skipped").1.len(), 1);
    }

    #[test]
    fn a_cut_document_is_eof_and_garbage_is_syntax() {
        assert!(matches!(all(br#"{"traceEvents":[{"a":1},{"b":"#), Err(ScanError::Eof)));
        assert!(matches!(all(b"hello"), Err(ScanError::Syntax(_))));
        assert!(matches!(all(br#"{"traceEvents":[{"a":1} {"b":2}]}"#), Err(ScanError::Syntax(_))));
    }
}
