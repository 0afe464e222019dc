//! Where a service's server listens: a free port, chosen where no outgoing connection can take
//! it between the check and the server's bind, and the placeholders filled with it.

use std::net::TcpListener;

use anyhow::{Context, Result};

/// The lowest port [`free_port`] picks from: above the well-known and most registered ones.
const PORTS_FROM: u16 = 10_000;

/// A port nobody listens on now, checked by binding it, and below the system's ephemeral
/// range (`net.ipv4.ip_local_port_range`): the system picks the local port of every outgoing
/// connection from that range, and a driver opens new ones every turn, so a port from it
/// could be taken between this check and the server's bind (seen: "Address already in use"
/// ending a run after some hundred server starts). The system's choice where the range
/// leaves no room below it or none there is free.
pub fn free_port() -> Result<u16> {
    let below = ephemeral_low().unwrap_or(32_768);
    if below > PORTS_FROM {
        let span = u64::from(below - PORTS_FROM);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut x = u64::from(nanos) ^ (u64::from(std::process::id()) << 32);
        for _ in 0..64 {
            // splitmix64: a random start per call, so runs side by side rarely meet.
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let port = PORTS_FROM + ((z ^ (z >> 31)) % span) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind a port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// The first port of the system's ephemeral range, where Linux says.
fn ephemeral_low() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `text` with `{addr}` and `{port}` filled in for `port`.
pub fn fill(text: &str, port: u16) -> String {
    text.replace("{addr}", &format!("127.0.0.1:{port}"))
        .replace("{port}", &port.to_string())
}

/// A driver's word: [`fill`], and `{pid}` filled in with the server's process id (what
/// `mty-loadgen --server-pid` reads the server's CPU time by).
pub fn fill_driver(text: &str, port: u16, pid: Option<u32>) -> String {
    let text = fill(text, port);
    match pid {
        Some(pid) => text.replace("{pid}", &pid.to_string()),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's port lies below the system's ephemeral range, where no outgoing connection
    /// (a driver's, every turn) can take it, and nothing listens on it.
    #[test]
    fn a_free_port_lies_below_the_ephemeral_range() {
        let below = ephemeral_low().expect("Linux says its ephemeral range");
        for _ in 0..50 {
            let port = free_port().unwrap();
            assert!(
                (PORTS_FROM..below).contains(&port),
                "{port} of {PORTS_FROM}..{below}"
            );
            drop(TcpListener::bind(("127.0.0.1", port)).expect("free"));
        }
    }
}
