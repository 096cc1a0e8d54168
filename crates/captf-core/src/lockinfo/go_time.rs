//! Go's `time.Time.UnmarshalJSON` for `Created`: RFC 3339 as Go 1.26's
//! layout parser reads it, which is more lenient than the RFC in a few
//! places (see docs/decisions/core-parity.md).

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

/// Parses `s` as Go 1.26's `time.Time.UnmarshalJSON` parses the bytes
/// between the quotes: `time.Parse(time.RFC3339, s)` (the strict checks in
/// `parseStrictRFC3339` are disabled in Go). Accepted:
/// `YYYY-MM-DDTh[h]:MM:SS[(.|,)digits](Z|±HH:MM)` with year 0000-9999, a
/// valid day of month, hour 0-23 (one or two digits), minute and second
/// 0-59, fraction digits beyond 9 truncated, offset hour 0-24 and offset
/// minute 0-60 (Go tolerates 24 and 60 on purpose). `T` and `Z` are
/// upper-case only.
pub fn parse_go_rfc3339(s: &[u8]) -> Option<DateTime<Utc>> {
    let mut c = Cursor { s, pos: 0 };
    let year = c.fixed_digits(4)?;
    c.byte(b'-')?;
    let month = c.fixed_digits(2)?;
    if !(1..=12).contains(&month) {
        return None;
    }
    c.byte(b'-')?;
    let day = c.fixed_digits(2)?;
    c.byte(b'T')?;
    // Go's layout engine reads the "15" hour with getnum(value, false).
    let hour = c.one_or_two_digits()?;
    if hour > 23 {
        return None;
    }
    c.byte(b':')?;
    let minute = c.fixed_digits(2)?;
    if minute > 59 {
        return None;
    }
    c.byte(b':')?;
    let second = c.fixed_digits(2)?;
    if second > 59 {
        return None;
    }
    let nanos = c.fraction();
    let offset_seconds = c.zone()?;
    if c.pos != s.len() {
        return None;
    }
    if day < 1 || day > days_in_month(month, year) {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    let local = date.and_hms_nano_opt(hour, minute, second, nanos)?;
    local
        .and_utc()
        .checked_sub_signed(TimeDelta::try_seconds(offset_seconds)?)
}

/// Go's zero `time.Time` instant, 0001-01-01T00:00:00Z (`IsZero`).
pub(super) fn is_go_zero_time(t: &DateTime<Utc>) -> bool {
    NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .is_some_and(|zero| zero.and_utc() == *t)
}

/// Go's `daysIn`, with its leap-year rule (year 0 is a leap year).
fn days_in_month(month: u32, year: u32) -> u32 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A byte cursor for [`parse_go_rfc3339`].
struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.s.get(self.pos + ahead).copied()
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.peek_at(0) == Some(want)).then(|| self.pos += 1)
    }

    fn digit(&mut self) -> Option<u32> {
        let c = self.peek_at(0).filter(u8::is_ascii_digit)?;
        self.pos += 1;
        Some(u32::from(c - b'0'))
    }

    fn fixed_digits(&mut self, n: usize) -> Option<u32> {
        let mut v = 0;
        for _ in 0..n {
            v = v * 10 + self.digit()?;
        }
        Some(v)
    }

    fn one_or_two_digits(&mut self) -> Option<u32> {
        let first = self.digit()?;
        Some(match self.digit() {
            Some(second) => first * 10 + second,
            None => first,
        })
    }

    /// An optional fraction: `.` or `,` followed by at least one digit.
    /// Returns nanoseconds, truncating digits beyond the ninth.
    fn fraction(&mut self) -> u32 {
        let sep = matches!(self.peek_at(0), Some(b'.' | b','));
        if !sep || !self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            return 0;
        }
        self.pos += 1;
        let mut nanos = 0;
        let mut scale = 100_000_000;
        while let Some(d) = self.digit() {
            nanos += d * scale;
            scale /= 10;
        }
        nanos
    }

    /// `Z`, or `±HH:MM`; returns the offset east of UTC in seconds.
    fn zone(&mut self) -> Option<i64> {
        let sign = match self.peek_at(0)? {
            b'Z' => {
                self.pos += 1;
                return Some(0);
            }
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        self.pos += 1;
        let hh = self.fixed_digits(2)?;
        self.byte(b':')?;
        let mm = self.fixed_digits(2)?;
        // Go's layout parser rejects only hh > 24 or mm > 60.
        if hh > 24 || mm > 60 {
            return None;
        }
        Some(sign * i64::from(hh * 3600 + mm * 60))
    }
}
