//! A small blocking HTTP/1.1 client for the executor's health, readiness and version requests to
//! the server it launched, on this machine or on a Slurm job's head node (one request per
//! connection; the benchmark uses bench's client).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Where a launched server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// A name or address (127.0.0.1 for the local executor, the head node's address for Slurm).
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// This machine's loopback.
    pub fn local(port: u16) -> Self {
        Self { host: "127.0.0.1".into(), port }
    }

    /// The base URL (`http://host:port`), IPv6 literals bracketed.
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }
}

/// A response: status and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpError {
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("i/o: {0}")]
    Io(String),
    #[error("not an HTTP response: {0}")]
    Malformed(String),
}

/// GET `path` from `ep`.
pub fn get(ep: &Endpoint, path: &str, timeout: Duration) -> Result<Response, HttpError> {
    request(ep, "GET", path, None, timeout)
}

/// POST a JSON `body` to `path` on `ep`.
pub fn post_json(ep: &Endpoint, path: &str, body: &str, timeout: Duration) -> Result<Response, HttpError> {
    request(ep, "POST", path, Some(body), timeout)
}

fn request(ep: &Endpoint, method: &str, path: &str, body: Option<&str>, timeout: Duration) -> Result<Response, HttpError> {
    let addr = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|e| HttpError::Connect(format!("{}: {e}", ep.host)))?
        .next()
        .ok_or_else(|| HttpError::Connect(format!("{} has no address", ep.host)))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| HttpError::Connect(e.to_string()))?;
    let io = |e: std::io::Error| HttpError::Io(e.to_string());
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\nAccept: application/json\r\n", ep.host, ep.port);
    if let Some(b) = body {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len());
    }
    req += "\r\n";
    req += body.unwrap_or("");
    s.write_all(req.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(io)?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> Result<Response, HttpError> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) =
        text.split_once("\r\n\r\n").ok_or_else(|| HttpError::Malformed(format!("{} bytes without a header end", raw.len())))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| HttpError::Malformed(head.lines().next().unwrap_or("").to_string()))?;
    let chunked =
        head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    Ok(Response { status, body })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").expect("plain");
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        let r = parse(b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").expect("chunked");
        assert_eq!((r.status, r.body.as_str()), (503, "abcde"));
        assert!(parse(b"garbage").is_err());
    }
}
