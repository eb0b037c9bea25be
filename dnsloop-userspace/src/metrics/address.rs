//! Where `--metrics-addr` listens: on loopback unless an address says otherwise, so that
//! metrics leave the node only when the operator asks.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "{0:?} is neither a port nor IP:PORT: give e.g. 9553 (127.0.0.1:9553), 0.0.0.0:9553 or [::]:9553"
)]
pub struct NotAListenAddress(String);

/// `9553` and `:9553` listen on 127.0.0.1; `0.0.0.0:9553`, `[::]:9553` or any IP:PORT listen
/// there. Host names are not taken: which address they resolve to would be a guess.
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, NotAListenAddress> {
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse().map_err(|_| NotAListenAddress(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> String {
        parse_listen_address(text)
            .map(|address| address.to_string())
            .unwrap_or_else(|error| error.to_string())
    }

    #[test]
    fn a_port_alone_listens_on_loopback_only() {
        assert_eq!(parsed("9553"), "127.0.0.1:9553");
        assert_eq!(parsed(":9553"), "127.0.0.1:9553");
    }

    #[test]
    fn a_full_address_listens_where_it_says() {
        assert_eq!(parsed("0.0.0.0:9553"), "0.0.0.0:9553");
        assert_eq!(parsed("10.0.0.5:80"), "10.0.0.5:80");
        assert_eq!(parsed("[::]:9553"), "[::]:9553");
        assert_eq!(parsed("[::1]:9553"), "[::1]:9553");
    }

    #[test]
    fn what_is_not_an_address_and_port_is_refused_with_examples() {
        for text in [
            "",
            ":",
            "99999",
            "::1",
            "[::1]",
            "10.0.0.5",
            "localhost:9553",
            "9553x",
        ] {
            let error = parse_listen_address(text).expect_err(text);
            assert!(error.to_string().contains("0.0.0.0:9553"), "{error}");
        }
    }
}
