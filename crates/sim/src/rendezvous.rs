//! Multi-node start-up of the simulated server, the way sglang's nodes meet (`--nnodes`,
//! `--node-rank`, `--dist-init-addr`): the head (rank 0) listens on the rendezvous address and
//! serves HTTP only once every other node has joined; a follower connects to the head, says its
//! rank, and runs until the head goes away. A follower given the wrong head address never joins,
//! so the head never becomes ready: exactly what a misconfigured multi-node launch does.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::SimError;

/// One node's place in a multi-node deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlace {
    /// Nodes in the deployment.
    pub nnodes: u32,
    /// This node's rank.
    pub rank: u32,
    /// The head's rendezvous address, `HOST:PORT`.
    pub addr: String,
}

impl NodePlace {
    /// Checks the flags; the error names them.
    pub fn new(nnodes: u32, rank: u32, addr: Option<&str>) -> Result<Option<Self>, SimError> {
        if nnodes == 0 {
            return Err(SimError::Input("--nnodes 0: a deployment has at least one node".into()));
        }
        if rank >= nnodes {
            return Err(SimError::Input(format!("--node-rank {rank} is not below --nnodes {nnodes}: ranks are 0..{}", nnodes - 1)));
        }
        if nnodes == 1 {
            return Ok(None);
        }
        let addr = addr
            .ok_or_else(|| SimError::Input("--nnodes > 1 needs --dist-init-addr HOST:PORT (the head node's rendezvous address)".into()))?;
        if addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
            return Err(SimError::Input(format!("--dist-init-addr {addr:?} is not HOST:PORT")));
        }
        Ok(Some(Self { nnodes, rank, addr: addr.to_string() }))
    }

    fn resolve(&self) -> Result<SocketAddr, SimError> {
        self.addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| SimError::Input(format!("--dist-init-addr {}: the host does not resolve", self.addr)))
    }

    /// Rank 0: waits until every other node has joined; returns their connections (kept open: a
    /// follower that leaves ends the deployment). `say` reports each join.
    pub fn head_wait(&self, timeout: Duration, say: &mut dyn FnMut(String)) -> Result<Vec<TcpStream>, SimError> {
        let at = self.resolve()?;
        let l = TcpListener::bind(SocketAddr::new(at.ip(), at.port()))
            .map_err(|e| SimError::Runtime(format!("cannot listen on the rendezvous address {}: {e}", self.addr)))?;
        l.set_nonblocking(true).map_err(|e| SimError::Runtime(e.to_string()))?;
        let until = Instant::now() + timeout;
        let mut joined = Vec::new();
        while joined.len() + 1 < self.nnodes as usize {
            match l.accept() {
                Ok((s, from)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut line = String::new();
                    let _ = BufReader::new(&s).read_line(&mut line);
                    say(format!("node {} of {} joined from {from}", line.trim().trim_start_matches("rank "), self.nnodes));
                    joined.push(s);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(SimError::Runtime(format!(
                        "only {} of {} nodes joined at {} within {timeout:?}: check the followers' --dist-init-addr",
                        joined.len() + 1,
                        self.nnodes,
                        self.addr
                    )))
                }
                Err(e) => return Err(SimError::Runtime(format!("rendezvous {}: {e}", self.addr))),
            }
        }
        Ok(joined)
    }

    /// A follower: joins the head (retrying while it starts), then blocks until the head closes
    /// the connection (it stopped) or `stop` says so.
    pub fn follow(&self, timeout: Duration, say: &mut dyn FnMut(String)) -> Result<(), SimError> {
        let at = self.resolve()?;
        let until = Instant::now() + timeout;
        let mut s = loop {
            match TcpStream::connect_timeout(&at, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(200)),
                Err(e) => {
                    return Err(SimError::Runtime(format!(
                        "node {} could not reach the head at {} within {timeout:?}: {e}",
                        self.rank, self.addr
                    )))
                }
            }
        };
        s.write_all(format!("rank {}\n", self.rank).as_bytes()).map_err(|e| SimError::Runtime(format!("rendezvous: {e}")))?;
        say(format!("node {} of {} joined the head at {}", self.rank, self.nnodes, self.addr));
        let mut buf = String::new();
        // The head never writes: read returns when it closes (0 bytes) or fails.
        let _ = BufReader::new(&s).read_line(&mut buf);
        say(format!("node {}: the head at {} closed the rendezvous; stopping", self.rank, self.addr));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked_with_their_names() {
        assert_eq!(NodePlace::new(1, 0, None).expect("single"), None);
        assert!(NodePlace::new(2, 2, Some("h:1")).expect_err("rank").to_string().contains("--node-rank 2"));
        assert!(NodePlace::new(2, 1, None).expect_err("addr").to_string().contains("--dist-init-addr"));
        assert!(NodePlace::new(2, 1, Some("nohost")).expect_err("port").to_string().contains("HOST:PORT"));
    }

    #[test]
    fn the_head_waits_for_every_follower_and_a_follower_stops_when_the_head_does() {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let addr = format!("127.0.0.1:{port}");
        let head = NodePlace::new(3, 0, Some(&addr)).expect("ok").expect("multi");
        let followers: Vec<_> = (1..3)
            .map(|r| {
                let p = NodePlace::new(3, r, Some(&addr)).expect("ok").expect("multi");
                std::thread::spawn(move || p.follow(Duration::from_secs(20), &mut |_| {}))
            })
            .collect();
        let mut said = Vec::new();
        let joined = head.head_wait(Duration::from_secs(20), &mut |l| said.push(l)).expect("all joined");
        assert_eq!(joined.len(), 2);
        assert_eq!(said.len(), 2, "{said:?}");
        drop(joined);
        for f in followers {
            assert!(f.join().expect("thread").is_ok());
        }
        let lonely = NodePlace::new(2, 0, Some(&addr)).expect("ok").expect("multi");
        let e = lonely.head_wait(Duration::from_millis(300), &mut |_| {}).expect_err("nobody joins");
        assert!(e.to_string().contains("only 1 of 2 nodes joined"), "{e}");
    }
}
