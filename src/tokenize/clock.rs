//! `strftime_now` for chat templates (several templates print today's date): the current
//! UTC time formatted with the common `strftime` directives, without a date-time crate.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Formats the current UTC time; supports `%Y %y %m %d %-d %B %b %A %a %H %M %S %j %%`
/// (other directives are copied literally).
pub fn strftime_now(format: &str) -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    strftime(format, secs)
}

/// Formats `secs` since the Unix epoch (UTC).
pub fn strftime(format: &str, secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let weekday = usize::try_from((days + 3).rem_euclid(7)).unwrap_or(0);
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut d = chars.next();
        let no_pad = d == Some('-');
        if no_pad {
            d = chars.next();
        }
        let num = |v: i64, w: usize| if no_pad { v.to_string() } else { format!("{v:0w$}") };
        match d {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&num(year.rem_euclid(100), 2)),
            Some('m') => out.push_str(&num(month, 2)),
            Some('d') => out.push_str(&num(day, 2)),
            Some('B') => out.push_str(MONTHS[usize::try_from(month - 1).unwrap_or(0)]),
            Some('b') => out.push_str(&MONTHS[usize::try_from(month - 1).unwrap_or(0)][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('H') => out.push_str(&num(i64::try_from(rem / 3600).unwrap_or(0), 2)),
            Some('M') => out.push_str(&num(i64::try_from(rem / 60 % 60).unwrap_or(0), 2)),
            Some('S') => out.push_str(&num(i64::try_from(rem % 60).unwrap_or(0), 2)),
            Some('j') => out.push_str(&num(yday, 3)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        // 2024-07-26 13:05:09 UTC, a Friday, day 208.
        let t = 1_722_000_309;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(strftime("%A %B %-d, %y %H:%M:%S %j %%", t), "Friday July 26, 24 13:25:09 208 %");
        assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
    }
}
