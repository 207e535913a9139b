//! How ranks that no MPI job launched find each other (`torchrun --no-python headroom train`,
//! or any launcher that sets `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`): rank 0
//! listens at the master's address and hands every other rank one message over TCP (NCCL's job
//! id), and the others connect until it answers or their deadline passes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The master's address and port, as the launcher gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Master {
    /// `MASTER_ADDR`: a host name or an address.
    pub addr: String,
    /// `MASTER_PORT`.
    pub port: u16,
}

impl Master {
    /// What the environment says (`MASTER_ADDR`, `MASTER_PORT`), or none without both. Under
    /// torchrun, whose agent holds `MASTER_PORT` for its own store
    /// (`TORCHELASTIC_USE_AGENT_STORE`), rank 0 listens at the port after it.
    pub fn from_env() -> Option<Self> {
        let addr = std::env::var("MASTER_ADDR").ok()?;
        let port: u16 = std::env::var("MASTER_PORT").ok()?.parse().ok()?;
        let agent = std::env::var("TORCHELASTIC_USE_AGENT_STORE").is_ok_and(|v| v == "True");
        let port = if agent { port.checked_add(1)? } else { port };
        Some(Self { addr, port })
    }
}

/// The bytes that identify the exchange, so that a rank does not take another program's
/// answer for its master's.
const MAGIC: &[u8; 8] = b"headroom";

/// Rank 0: listens at `master`'s port and sends `message` to each of the `size - 1` other
/// ranks as it connects, waiting at most `timeout` for all of them.
pub fn serve(master: &Master, size: usize, message: &[u8], timeout: Duration) -> Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", master.port)).map_err(|err| {
        failed(
            format!("rank 0 could not listen on port {}", master.port),
            err,
        )
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|err| failed("rank 0 could not listen".into(), err))?;
    let deadline = Instant::now() + timeout;
    let mut answered = 0;
    while answered < size - 1 {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .and_then(|()| stream.write_all(MAGIC))
                    .and_then(|()| stream.write_all(&(message.len() as u64).to_le_bytes()))
                    .and_then(|()| stream.write_all(message))
                    .map_err(|err| failed("rank 0 could not answer a rank".into(), err))?;
                answered += 1;
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(Error::config(format!(
                        "rank 0: {answered} of the {} other ranks reached port {} within \
                         {timeout:?}; check WORLD_SIZE and that every rank was started",
                        size - 1,
                        master.port
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => return Err(failed("rank 0 could not accept a rank".into(), err)),
        }
    }
    Ok(())
}

/// Any other rank: the message rank 0 serves at `master`, asked for until rank 0 answers or
/// `timeout` has passed.
pub fn receive(master: &Master, timeout: Duration) -> Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let target = format!("{}:{}", master.addr, master.port);
    loop {
        let connected = target
            .to_socket_addrs()
            .map_err(|err| failed(format!("MASTER_ADDR {target}"), err))?
            .find_map(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok());
        if let Some(mut stream) = connected {
            return read_message(&mut stream, deadline)
                .map_err(|err| failed(format!("reading rank 0's answer from {target}"), err));
        }
        if Instant::now() >= deadline {
            return Err(Error::config(format!(
                "rank 0 did not answer at {target} within {timeout:?}: check MASTER_ADDR and \
                 MASTER_PORT, and that rank 0 was started"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The message on `stream` after its magic bytes and length.
fn read_message(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let left = deadline.saturating_duration_since(Instant::now());
    stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let mut magic = [0; 8];
    stream.read_exact(&mut magic)?;
    let mut len = [0; 8];
    stream.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if &magic != MAGIC || len > 1 << 16 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a headroom rank 0's answer",
        ));
    }
    let mut message = vec![0; len as usize];
    stream.read_exact(&mut message)?;
    Ok(message)
}

/// An error of the exchange: `what` failed with `err`.
fn failed(what: String, err: std::io::Error) -> Error {
    Error::config(format!("joining the ranks: {what}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port no other test of this binary uses.
    fn master(port: u16) -> Master {
        Master {
            addr: "127.0.0.1".into(),
            port,
        }
    }

    #[test]
    fn rank_0_hands_its_message_to_every_other_rank() {
        let master = master(29_517);
        let message: Vec<u8> = (0..129).map(|i| i as u8).collect();
        std::thread::scope(|s| {
            // The others start first and wait for rank 0.
            let others: Vec<_> = (0..3)
                .map(|_| s.spawn(|| receive(&master, Duration::from_secs(20)).unwrap()))
                .collect();
            std::thread::sleep(Duration::from_millis(100));
            serve(&master, 4, &message, Duration::from_secs(20)).unwrap();
            for other in others {
                assert_eq!(other.join().unwrap(), message);
            }
        });
    }

    #[test]
    fn a_missing_rank_or_master_fails_within_the_deadline_naming_what_to_check() {
        let short = Duration::from_millis(300);
        let err = serve(&master(29_518), 2, b"id", short)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("0 of the 1 other ranks reached port 29518"),
            "{err}"
        );
        let err = receive(&master(29_519), short).unwrap_err().to_string();
        assert!(
            err.contains("rank 0 did not answer at 127.0.0.1:29519"),
            "{err}"
        );
    }
}
