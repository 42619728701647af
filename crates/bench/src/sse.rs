//! Incremental Server-Sent Events parser: bytes in any split, events out (WHATWG EventSource rules).
//!
//! Handles frames split or merged across reads, `:` comments (keep-alives), `event:`/`id:` fields,
//! CRLF, CR and LF line ends, and multi-line `data:` (joined with `\n`). It never allocates per byte
//! and never panics on odd input; a line, or an event's data, longer than `max_line` is an error,
//! not unbounded growth.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent (the spec's default type is "message").
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// One dispatched event, borrowed from the parser: valid for the call it is handed to. The
/// parser keeps its buffers between events, so reading a stream this way allocates nothing per
/// event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseRef<'a> {
    /// The `event:` field, empty when absent.
    pub event: &'a str,
    /// The `data:` lines joined with `\n`.
    pub data: &'a str,
}

impl SseRef<'_> {
    /// An owned copy.
    pub fn owned(self) -> SseEvent {
        SseEvent { event: self.event.to_string(), data: self.data.to_string() }
    }
}

/// Why the stream cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line longer than the limit.
    #[error("an SSE line is longer than {0} bytes: the response is not an event stream")]
    LineTooLong(usize),
    /// An event whose `data:` lines add up to more than the limit (a server that never ends it).
    #[error("an SSE event's data is longer than {0} bytes: the server never ended the event")]
    EventTooLong(usize),
    /// Bytes that are not UTF-8.
    #[error("an SSE line is not UTF-8")]
    NotUtf8,
}

/// Streaming parser state. Feed bytes with [`SseParser::feed`]; call [`SseParser::finish`] at the end.
#[derive(Debug)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already scanned for a line end.
    scanned: usize,
    /// The previous chunk ended in CR: a following LF belongs to that line end.
    skip_lf: bool,
    event: String,
    data: String,
    has_data: bool,
    max_line: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new(1 << 20)
    }
}

impl SseParser {
    /// A parser refusing lines longer than `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        Self { buf: Vec::new(), scanned: 0, skip_lf: false, event: String::new(), data: String::new(), has_data: false, max_line }
    }

    /// Feeds bytes; calls `on_event` with an owned copy of each event completed by them.
    pub fn feed(&mut self, bytes: &[u8], on_event: &mut impl FnMut(SseEvent)) -> Result<(), SseError> {
        self.feed_ref(bytes, &mut |e| on_event(e.owned()))
    }

    /// Ends the stream, as [`SseParser::finish_ref`], with owned events.
    pub fn finish(&mut self, on_event: &mut impl FnMut(SseEvent)) -> Result<(), SseError> {
        self.finish_ref(&mut |e| on_event(e.owned()))
    }

    /// Feeds bytes; calls `on_event` with each event completed by them, borrowed.
    pub fn feed_ref(&mut self, mut bytes: &[u8], on_event: &mut impl FnMut(SseRef<'_>)) -> Result<(), SseError> {
        // A CR ended the previous read: an LF opening this one completes that line end. Only the
        // first byte of a non-empty read can be that LF (clearing the flag after skipping it, not
        // only when bytes remain, keeps a lone "\n" read from also swallowing the next "\n").
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        // Fast path: nothing buffered, parse lines straight from the input.
        let mut start = 0;
        if self.buf.is_empty() {
            let mut i = 0;
            while i < bytes.len() {
                let b = bytes[i];
                if b == b'\n' || b == b'\r' {
                    self.line(&bytes[start..i], on_event)?;
                    if b == b'\r' {
                        if i + 1 < bytes.len() {
                            if bytes[i + 1] == b'\n' {
                                i += 1;
                            }
                        } else {
                            self.skip_lf = true;
                        }
                    }
                    start = i + 1;
                }
                i += 1;
            }
            let rest = &bytes[start..];
            if rest.len() > self.max_line {
                return Err(SseError::LineTooLong(self.max_line));
            }
            self.buf.extend_from_slice(rest);
            self.scanned = self.buf.len();
            return Ok(());
        }
        self.buf.extend_from_slice(bytes);
        let mut line_start = 0;
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                let line = std::mem::take(&mut self.buf);
                let r = self.line(&line[line_start..i], on_event);
                self.buf = line;
                r?;
                if b == b'\r' {
                    if i + 1 < self.buf.len() {
                        if self.buf[i + 1] == b'\n' {
                            i += 1;
                        }
                    } else {
                        self.skip_lf = true;
                    }
                }
                line_start = i + 1;
            }
            i += 1;
        }
        self.buf.drain(..line_start);
        self.scanned = self.buf.len();
        if self.buf.len() > self.max_line {
            return Err(SseError::LineTooLong(self.max_line));
        }
        Ok(())
    }

    /// Ends the stream. Per the spec an event not closed by a blank line is discarded; the unfinished
    /// line is processed first, so a final `data: [DONE]` without a newline is still seen.
    pub fn finish_ref(&mut self, on_event: &mut impl FnMut(SseRef<'_>)) -> Result<(), SseError> {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.line(&line, on_event)?;
            self.scanned = 0;
        }
        // Lenient: dispatch a pending event at EOF. Servers that drop the last blank line are common,
        // and losing their final usage event would undercount tokens.
        self.dispatch(on_event);
        Ok(())
    }

    /// Bytes held for an unfinished line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    fn line(&mut self, line: &[u8], on_event: &mut impl FnMut(SseRef<'_>)) -> Result<(), SseError> {
        // The same limit as for an unfinished line, so the verdict never depends on how reads fall
        // (a long line inside one read was accepted, the same line split across reads was not).
        if line.len() > self.max_line {
            return Err(SseError::LineTooLong(self.max_line));
        }
        if line.is_empty() {
            self.dispatch(on_event);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment / keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                let v = std::str::from_utf8(value).map_err(|_| SseError::NotUtf8)?;
                if self.data.len() + v.len() >= self.max_line {
                    return Err(SseError::EventTooLong(self.max_line));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(v);
                self.has_data = true;
            }
            b"event" => {
                let v = std::str::from_utf8(value).map_err(|_| SseError::NotUtf8)?;
                self.event.clear();
                self.event.push_str(v);
            }
            _ => {} // id, retry and unknown fields do not matter to a benchmark
        }
        Ok(())
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseRef<'_>)) {
        if self.has_data {
            on_event(SseRef { event: &self.event, data: &self.data });
        }
        // Cleared, not replaced: the next event reuses the capacity.
        self.event.clear();
        self.data.clear();
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut |e| out.push(e)).expect("feed");
        }
        p.finish(&mut |e| out.push(e)).expect("finish");
        out
    }

    #[test]
    fn an_event_whose_data_never_ends_is_an_error_not_growth() {
        let mut p = SseParser::new(64);
        let mut n = 0;
        let mut res = Ok(());
        for _ in 0..100 {
            res = p.feed(b"data: 0123456789\n", &mut |_| n += 1);
            if res.is_err() {
                break;
            }
        }
        assert_eq!(res, Err(SseError::EventTooLong(64)));
        assert_eq!(n, 0);
    }

    #[test]
    fn keepalive_comments_and_event_lines_are_handled() {
        let ev = parse_all(&[b": ping\n\nevent: error\ndata: {\"a\":1}\n\n"]);
        assert_eq!(ev, vec![SseEvent { event: "error".into(), data: "{\"a\":1}".into() }]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newline() {
        let ev = parse_all(&[b"data: a\r\ndata: b\r\n\r\ndata: [DONE]\r\n\r\n"]);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].data, "a\nb");
        assert_eq!(ev[1].data, "[DONE]");
    }

    #[test]
    fn crlf_split_between_reads_is_one_line_end() {
        let ev = parse_all(&[b"data: x\r", b"\n\r", b"\ndata: y\n\n"]);
        assert_eq!(ev.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(), vec!["x", "y"]);
    }

    #[test]
    fn final_event_without_blank_line_is_kept() {
        let ev = parse_all(&[b"data: [DONE]"]);
        assert_eq!(ev[0].data, "[DONE]");
    }

    #[test]
    fn overlong_line_is_an_error() {
        let mut p = SseParser::new(16);
        let r = p.feed(&[b'x'; 40], &mut |_| {});
        assert_eq!(r, Err(SseError::LineTooLong(16)));
    }
}
