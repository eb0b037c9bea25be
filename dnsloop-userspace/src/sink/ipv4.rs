//! IPv4 socket addresses as `--packets` lines write them.
use std::net::SocketAddrV4;

/// The `Display` form of an IPv4 socket address (`10.244.0.2:53`), built on the stack and
/// copied into a line at once: through `Display`, it takes the formatting machinery five
/// times, and a number at a time, as many copies.
pub struct Ipv4Text {
    bytes: [u8; Ipv4Text::LONGEST],
    len: usize,
}

impl Ipv4Text {
    /// `255.255.255.255:65535`.
    const LONGEST: usize = 21;

    pub fn new(addr: &SocketAddrV4) -> Self {
        let mut text = Self {
            bytes: [0; Self::LONGEST],
            len: 0,
        };
        for (at, octet) in addr.ip().octets().into_iter().enumerate() {
            if at > 0 {
                text.push(b'.');
            }
            text.number(u16::from(octet));
        }
        text.push(b':');
        text.number(addr.port());
        text
    }

    fn number(&mut self, n: u16) {
        let mut digits = [0u8; 5];
        let mut count = 0;
        let mut rest = n;
        while let Some(digit) = digits.get_mut(count) {
            *digit = b'0' + (rest % 10) as u8;
            count += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        for &digit in digits[..count].iter().rev() {
            self.push(digit);
        }
    }

    fn push(&mut self, byte: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    pub fn as_str(&self) -> &str {
        // Digits, dots and a colon: always ASCII.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses_read_as_they_display() {
        for text in [
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.244.0.2:53",
            "169.254.25.10:9",
        ] {
            let addr: SocketAddrV4 = text.parse().expect("an address");
            assert_eq!(Ipv4Text::new(&addr).as_str(), addr.to_string());
        }
    }
}
