//! Timestamps as DeerFlow's memory writes them (`2026-05-08T10:30:00Z`), made and read
//! without a date library: Howard Hinnant's civil-from-days and its inverse.

/// `ms` (Unix milliseconds) as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn iso(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as [`iso`] writes it.
pub fn now_iso() -> String {
    iso(antler_protocol::sys::unix_ms() as i64)
}

/// The date part of an ISO timestamp (`2026-05-08`), or the text as it is.
pub fn iso_date(text: &str) -> &str {
    text.get(..10).unwrap_or(text)
}

/// An ISO timestamp's day number since 1970-01-01 (time of day and zone ignored).
pub fn parse_iso(text: &str) -> Option<i64> {
    let date = text.get(..10)?;
    let mut parts = date.split('-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: i64 = parts.next()?.parse().ok()?;
    let day: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// Whole days from day `from` to day `to`.
pub fn days_between(from: i64, to: i64) -> i64 {
    to - from
}

fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(1_778_236_200_000), "2026-05-08T10:30:00Z");
        assert_eq!(
            parse_iso("2026-05-08T10:30:00Z"),
            Some(1_778_236_200 / 86_400)
        );
        assert_eq!(parse_iso("1970-01-01"), Some(0));
        assert_eq!(parse_iso("nonsense"), None);
    }
}
