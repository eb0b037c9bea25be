//! Timestamps as dnsloop prints them, in UTC.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last millisecond RFC 3339 can show: 9999-12-31T23:59:59.999Z.
const LATEST: Duration = Duration::from_millis(253_402_300_799_999);

/// `2025-01-01T12:00:01.123Z`. A time RFC 3339 cannot show (before 1970 or after 9999, from a
/// broken clock or capture) is clamped to its range rather than lost.
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + since_epoch(at)).to_string()
}

/// `12:00:01.123`: the time of day, for a person following along.
pub fn time_of_day(at: SystemTime) -> String {
    let mut text = String::with_capacity(12);
    write_time_of_day(at, &mut text);
    text
}

/// Appends `time_of_day(at)` to `text`, digit by digit: `--packets` writes one per packet.
pub fn write_time_of_day(at: SystemTime, text: &mut String) {
    let since_epoch = since_epoch(at);
    let seconds = since_epoch.as_secs() % 86_400;
    let digit = |n: u64| char::from(b'0' + (n % 10) as u8);
    for (at, part) in [seconds / 3600, seconds / 60 % 60, seconds % 60]
        .into_iter()
        .enumerate()
    {
        if at > 0 {
            text.push(':');
        }
        text.push(digit(part / 10));
        text.push(digit(part));
    }
    let millis = u64::from(since_epoch.subsec_millis());
    text.push('.');
    text.push(digit(millis / 100));
    text.push(digit(millis / 10));
    text.push(digit(millis));
}

/// `rfc3339` for a stream of timestamps, as `--packets` writes one per packet: most share their
/// second with the one before, so the date and time of day are formatted once per second and
/// only the milliseconds per timestamp.
#[derive(Default)]
pub struct Rfc3339Writer {
    /// The second formatted last, and its text up to the milliseconds (`...T12:00:01.`).
    second: Option<(u64, String)>,
}

impl Rfc3339Writer {
    /// Appends `rfc3339(at)` to `out`.
    pub fn write(&mut self, at: SystemTime, out: &mut Vec<u8>) {
        let since_epoch = since_epoch(at);
        let second = since_epoch.as_secs();
        let prefix = match &mut self.second {
            Some((formatted, prefix)) if *formatted == second => prefix,
            slot => {
                let mut text = rfc3339(UNIX_EPOCH + Duration::from_secs(second));
                text.truncate(text.len() - "000Z".len());
                &mut slot.insert((second, text)).1
            }
        };
        out.extend_from_slice(prefix.as_bytes());
        let millis = since_epoch.subsec_millis();
        out.extend_from_slice(&[
            b'0' + (millis / 100) as u8,
            b'0' + (millis / 10 % 10) as u8,
            b'0' + (millis % 10) as u8,
            b'Z',
        ]);
    }
}

fn since_epoch(at: SystemTime) -> Duration {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .min(LATEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_with_milliseconds() {
        let at = UNIX_EPOCH + Duration::from_millis(1_735_732_801_123);
        assert_eq!(rfc3339(at), "2025-01-01T12:00:01.123Z");
        assert_eq!(time_of_day(at), "12:00:01.123");
    }

    #[test]
    fn clamps_times_rfc_3339_cannot_show() {
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00.000Z"
        );
        let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(rfc3339(far), "9999-12-31T23:59:59.999Z");
        assert_eq!(time_of_day(far), "23:59:59.999");
    }

    #[test]
    fn the_writer_writes_what_rfc3339_formats() {
        let mut writer = Rfc3339Writer::default();
        let mut out = Vec::new();
        let times = [
            UNIX_EPOCH + Duration::from_millis(1_735_732_801_123),
            UNIX_EPOCH + Duration::from_millis(1_735_732_801_999),
            UNIX_EPOCH + Duration::from_nanos(1_735_732_801_000_999_999),
            UNIX_EPOCH + Duration::from_millis(1_735_732_802_000),
            UNIX_EPOCH + Duration::from_millis(1_735_732_801_050),
            UNIX_EPOCH - Duration::from_millis(1),
            UNIX_EPOCH + Duration::from_secs(400_000_000_000),
            UNIX_EPOCH,
        ];
        for at in times {
            out.clear();
            writer.write(at, &mut out);
            assert_eq!(String::from_utf8(out.clone()).unwrap(), rfc3339(at));
        }
    }
}
