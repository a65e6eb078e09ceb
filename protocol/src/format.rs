//! How numbers and times read, wherever pipe shows them: `pipe compare`,
//! `pipe diff`, `pipe runs`, reports and charts. One copy of each, so a
//! metric prints the same in a table and in the report of the same run.

/// Significant digits shown by default.
pub const SIGNIFICANT_DIGITS: usize = 4;
/// Enough to print any f64 so that it reads back the same.
const MAX_SIGNIFICANT_DIGITS: usize = 17;

/// `value` with `digits` significant digits, trailing zeros dropped:
/// `0.4196236128689813` -> `0.4196`; whole numbers are printed whole
/// (`12346`), very small and very large ones in exponent form
/// (`1.235e-5`), `-0` as `0`, NaN and the infinities by name.
pub fn format_significant(value: f64, digits: usize) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    if value == value.trunc() && value.abs() < 1e15 {
        return format!("{}", value as i64);
    }
    let digits = digits.max(1);
    // The exponent after rounding: 0.99996 is 1.000, not 9.9996e-1.
    let scientific = format!("{:.*e}", digits - 1, value);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let magnitude: i32 = exponent.parse().unwrap_or(0);
    if !(-4..15).contains(&magnitude) {
        return format!("{}e{exponent}", trim_fraction(mantissa));
    }
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    let text = trim_fraction(&format!("{value:.decimals$}")).to_string();
    if text == "-0" {
        "0".to_string()
    } else {
        text
    }
}

/// [`format_significant`] with [`SIGNIFICANT_DIGITS`].
pub fn format_number(value: f64) -> String {
    format_significant(value, SIGNIFICANT_DIGITS)
}

fn trim_fraction(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// The fewest significant digits, at least [`SIGNIFICANT_DIGITS`], that
/// print every distinct value of `values` differently.
pub fn digits_to_tell_apart(values: &[f64]) -> usize {
    let mut distinct: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    // Only neighbours in sorted order can print alike first.
    (SIGNIFICANT_DIGITS..MAX_SIGNIFICANT_DIGITS)
        .find(|&digits| {
            distinct.windows(2).all(|pair| {
                format_significant(pair[0], digits) != format_significant(pair[1], digits)
            })
        })
        .unwrap_or(MAX_SIGNIFICANT_DIGITS)
}

/// Milliseconds since the Unix epoch as `2026-11-30 23:56:27` (UTC).
pub fn utc_date_time(ms: u64) -> String {
    let seconds = ms / 1000;
    let days = (seconds / 86_400) as i64;
    let time = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        time / 3600,
        time / 60 % 60,
        time % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's civil-from-days, in 400-year eras): no date crate for one
/// formula.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_four_significant_digits() {
        let cases = [
            (0.4196236128689813, "0.4196"),
            (12.3456, "12.35"),
            (9.99996, "10"),
            (0.5, "0.5"),
            (-3.0, "-3"),
            (12345.678, "12346"),
            (1000.0, "1000"),
            (0.000012346, "1.235e-5"),
            (-0.00001, "-1e-5"),
            (0.0, "0"),
            (-0.0, "0"),
            (-0.00004, "-4e-5"),
            (-0.0000001, "-1e-7"),
            (1.0, "1"),
            (999.96, "1000"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (value, expected) in cases {
            assert_eq!(format_number(value), expected, "{value}");
        }
    }

    #[test]
    fn digits_grow_until_neighbours_differ() {
        assert_eq!(digits_to_tell_apart(&[0.5248, 0.52481]), 5);
        assert_eq!(digits_to_tell_apart(&[0.1, 0.2]), SIGNIFICANT_DIGITS);
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc_date_time(0), "1970-01-01 00:00:00");
        assert_eq!(utc_date_time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc_date_time(1_796_083_587_000), "2026-12-01 00:06:27");
    }
}
