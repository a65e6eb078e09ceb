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

/// What a metric's number counts, read from its name's last dotted
/// segment: shown in human units (`1.79 GiB`, `3 min 12 s`, `93.4
/// GFLOP/s`) instead of a raw count, so that a value reads the same in
/// `pipe diff`, `pipe compare` and `pipe show`. JSON and CSV keep the raw
/// numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// `*_bytes`.
    Bytes,
    /// `*_mb`: mebibytes, as `peak_rss_mb` counts them; shown as bytes.
    Megabytes,
    /// `*_seconds`, `*_secs`, `*_sec`, `*_s` (not a rate: `samples_per_s`).
    Seconds,
    /// `*_ms`.
    Milliseconds,
    /// `*flops_per_s`: floating-point operations per second.
    FlopsPerSecond,
    /// A count of floating-point operations (`flops_per_step`).
    Flops,
    /// `*bytes_per_s`.
    BytesPerSecond,
    /// Any other rate (`samples_per_s`, `tokens_per_sec`).
    PerSecond,
}

/// The words a rate ends in after `per`.
const PER_SECOND: &[&str] = &["s", "sec", "secs", "second", "seconds"];

impl Unit {
    /// The unit of a metric named `metric` (`memory.peak_rss_bytes`,
    /// `train_seconds`, `throughput.flops_per_s`), if its name says one.
    pub fn of(metric: &str) -> Option<Unit> {
        let name = metric
            .rsplit('.')
            .next()
            .unwrap_or(metric)
            .to_ascii_lowercase();
        let words: Vec<&str> = name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|word| !word.is_empty())
            .collect();
        let flops = |words: &[&str]| words.iter().any(|word| matches!(*word, "flops" | "flop"));
        if let Some(per) = words.iter().position(|word| *word == "per") {
            let (amount, after) = (&words[..per], &words[per + 1..]);
            let rate = matches!(after, [time] if PER_SECOND.contains(time));
            // `flops_per_step` is still a count; `loss_per_token` no unit.
            return match (rate, amount.last()) {
                (_, None) => None,
                (true, _) if flops(amount) => Some(Unit::FlopsPerSecond),
                (true, Some(&"bytes")) => Some(Unit::BytesPerSecond),
                (true, Some(_)) => Some(Unit::PerSecond),
                (false, _) if flops(amount) => Some(Unit::Flops),
                (false, _) => None,
            };
        }
        if flops(&words) {
            return Some(Unit::Flops);
        }
        match words.last().copied()? {
            "bytes" => Some(Unit::Bytes),
            "mb" if words.len() > 1 => Some(Unit::Megabytes),
            "seconds" | "secs" | "sec" | "s" if words.len() > 1 || name == "seconds" => {
                Some(Unit::Seconds)
            }
            "ms" if words.len() > 1 => Some(Unit::Milliseconds),
            _ => None,
        }
    }

    /// `value` of this unit in human units.
    pub fn format(self, value: f64) -> String {
        match self {
            Unit::Bytes => format_bytes(value),
            Unit::Megabytes => format_bytes(value * 1024.0 * 1024.0),
            Unit::Seconds => format_seconds(value),
            Unit::Milliseconds => format_seconds(value / 1000.0),
            Unit::FlopsPerSecond => format_si(value, "FLOP/s"),
            Unit::Flops => format_si(value, "FLOP"),
            Unit::BytesPerSecond => format!("{}/s", format_bytes(value)),
            Unit::PerSecond => format!("{}/s", format_significant(value, 3)),
        }
    }

    /// A signed change of this unit: `+12 MiB`, `-1 min 4 s`.
    pub fn format_delta(self, delta: f64) -> String {
        let text = self.format(delta.abs());
        if delta > 0.0 {
            format!("+{text}")
        } else if delta < 0.0 {
            format!("-{text}")
        } else {
            text
        }
    }
}

/// A metric's value as people read it: in its unit when it has one,
/// otherwise with `digits` significant digits (those that tell the values
/// side by side apart, [`digits_to_tell_apart`]).
pub fn format_metric(unit: Option<Unit>, value: f64, digits: usize) -> String {
    match unit {
        Some(unit) => unit.format(value),
        None => format_significant(value, digits),
    }
}

/// A change of a metric, signed, in the metric's unit when it has one:
/// `+21.9 MiB`, `-15.8 GFLOP/s`, `+0.000101`.
pub fn format_metric_delta(unit: Option<Unit>, delta: f64) -> String {
    match unit {
        Some(unit) => unit.format_delta(delta),
        None => format_delta(delta),
    }
}

/// A signed change without unit, 3 significant digits: `+0.000101`,
/// `-2.5`, `0`.
pub fn format_delta(delta: f64) -> String {
    let text = format_significant(delta, 3);
    if delta > 0.0 {
        format!("+{text}")
    } else if text == "-0" {
        "0".to_string()
    } else {
        text
    }
}

/// A relative change as a signed percentage: `+50%`, `-0.024%`.
pub fn format_percent(relative: f64) -> String {
    let percent = relative * 100.0;
    let text = if percent.abs() >= 10.0 {
        format!("{percent:.0}")
    } else if percent.abs() >= 0.1 {
        let text = format!("{percent:.1}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format_significant(percent, 2)
    };
    if percent > 0.0 {
        format!("+{text}%")
    } else {
        format!("{text}%")
    }
}

/// A byte count with binary units and 3 significant digits: `512 B`,
/// `1.79 GiB`, `12.5 MiB`.
pub fn format_bytes(count: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if !count.is_finite() {
        return format!("{count} B");
    }
    let sign = if count < 0.0 { "-" } else { "" };
    let mut value = count.abs();
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    // 1023.9 KiB would read `1024 KiB`: the next unit up instead.
    let mut text = format_significant(value, 3);
    if text == "1024" && unit > 0 && unit < UNITS.len() - 1 {
        unit += 1;
        text = "1".to_string();
    }
    format!("{sign}{text} {}", UNITS[unit])
}

/// `value` of `unit` with a decimal (SI) prefix and 3 significant digits:
/// `93.4 GFLOP/s`, `1.2 TFLOP`, `512 FLOP`. FLOP counts are quoted in
/// powers of 1000, not 1024.
fn format_si(value: f64, unit: &str) -> String {
    const PREFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    if !value.is_finite() {
        return format!("{value} {unit}");
    }
    let sign = if value < 0.0 { "-" } else { "" };
    let mut scaled = value.abs();
    let mut prefix = 0;
    while scaled >= 1000.0 && prefix < PREFIXES.len() - 1 {
        scaled /= 1000.0;
        prefix += 1;
    }
    // 999.96 G would read `1000 G`: the next prefix up instead.
    let mut text = format_significant(scaled, 3);
    if text == "1000" && prefix < PREFIXES.len() - 1 {
        prefix += 1;
        text = "1".to_string();
    }
    format!("{sign}{text} {}{unit}", PREFIXES[prefix])
}

/// A duration in seconds as a person reads it: `350 ms`, `4.25 s`,
/// `3 min 12 s`, `2 h 5 min`. The one spelling of a duration in pipe's
/// output (run and stage times, ETAs, metrics, reports), so that a time
/// reads alike wherever it is shown.
pub fn format_seconds(seconds: f64) -> String {
    if !seconds.is_finite() {
        return format!("{seconds} s");
    }
    let sign = if seconds < 0.0 { "-" } else { "" };
    let seconds = seconds.abs();
    if seconds == 0.0 {
        return "0 s".to_string();
    }
    if seconds < 1.0 {
        let text = format_significant(seconds * 1000.0, 3);
        // 0.9996 s rounds up to a second.
        if text != "1000" {
            return format!("{sign}{text} ms");
        }
    }
    if seconds < 60.0 {
        let text = format_significant(seconds, 3);
        // 59.96 s rounds up to a minute.
        if text != "60" {
            return format!("{sign}{text} s");
        }
    }
    let whole = seconds.round() as u64;
    if whole < 3600 {
        return format!("{sign}{} min {} s", whole / 60, whole % 60);
    }
    let minutes = (seconds / 60.0).round() as u64;
    format!("{sign}{} h {} min", minutes / 60, minutes % 60)
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
    fn units_come_from_the_last_word_of_the_name() {
        let cases = [
            ("memory.peak_rss_bytes", Some(Unit::Bytes)),
            ("peak_rss_mb", Some(Unit::Megabytes)),
            ("train_seconds", Some(Unit::Seconds)),
            ("epochs.1.epoch_seconds", Some(Unit::Seconds)),
            ("seconds", Some(Unit::Seconds)),
            ("wall_s", Some(Unit::Seconds)),
            ("throughput.forward_ms", Some(Unit::Milliseconds)),
            ("step_ms", Some(Unit::Milliseconds)),
            ("throughput.flops_per_s", Some(Unit::FlopsPerSecond)),
            ("model_flops_per_second", Some(Unit::FlopsPerSecond)),
            ("throughput.flops_per_step", Some(Unit::Flops)),
            ("total_flops", Some(Unit::Flops)),
            ("samples_per_s", Some(Unit::PerSecond)),
            ("tokens_per_sec", Some(Unit::PerSecond)),
            ("bytes_per_second", Some(Unit::BytesPerSecond)),
            ("loss_per_token", None),
            ("per_s", None),
            ("ms", None),
            ("mb", None),
            ("s", None),
            ("tflops", None),
            ("throughput.mfu", None),
            ("accuracy", None),
            ("wall_time", None),
        ];
        for (metric, unit) in cases {
            assert_eq!(Unit::of(metric), unit, "{metric}");
        }
    }

    #[test]
    fn bytes_read_in_binary_units_with_three_digits() {
        assert_eq!(format_bytes(0.0), "0 B");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(1_925_935_268.0), "1.79 GiB");
        assert_eq!(format_bytes(13_107_200.0), "12.5 MiB");
        assert_eq!(format_bytes(1_048_575.0), "1 MiB");
        assert_eq!(format_bytes(-2048.0), "-2 KiB");
        assert_eq!(format_bytes(3.0 * 1024f64.powi(5)), "3 PiB");
        assert_eq!(format_bytes(4096.0 * 1024f64.powi(5)), "4096 PiB");
        assert_eq!(Unit::Bytes.format(1_572_143_628.0), "1.46 GiB");
        assert_eq!(Unit::Bytes.format_delta(22_957_523.0), "+21.9 MiB");
        assert_eq!(Unit::Bytes.format_delta(1024.0), "+1 KiB");
        assert_eq!(Unit::Bytes.format_delta(0.0), "0 B");
        // A value in MiB reads as bytes do.
        assert_eq!(Unit::Megabytes.format(1499.0), "1.46 GiB");
        assert_eq!(Unit::Megabytes.format(850.0), "850 MiB");
        assert_eq!(Unit::Megabytes.format(0.5), "512 KiB");
        assert_eq!(Unit::Megabytes.format_delta(-21.9), "-21.9 MiB");
    }

    #[test]
    fn durations_have_one_spelling() {
        let cases = [
            (0.0, "0 s"),
            (0.35, "350 ms"),
            (0.000_012_3, "0.0123 ms"),
            (0.9996, "1 s"),
            (7.123, "7.12 s"),
            (38.5, "38.5 s"),
            (59.96, "1 min 0 s"),
            (81.0, "1 min 21 s"),
            (192.0, "3 min 12 s"),
            (3599.6, "1 h 0 min"),
            (7500.0, "2 h 5 min"),
            (360_000.0, "100 h 0 min"),
            (-82.0, "-1 min 22 s"),
            (f64::INFINITY, "inf s"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(format_seconds(seconds), expected, "{seconds}");
        }
        assert_eq!(Unit::Seconds.format(64.69), "1 min 5 s");
        assert_eq!(Unit::Seconds.format_delta(10.75), "+10.8 s");
        assert_eq!(Unit::Seconds.format_delta(-82.0), "-1 min 22 s");
        assert_eq!(Unit::Milliseconds.format(1500.0), "1.5 s");
        assert_eq!(Unit::Milliseconds.format(338.0), "338 ms");
        assert_eq!(Unit::Milliseconds.format_delta(-0.25), "-0.25 ms");
    }

    #[test]
    fn flops_take_decimal_prefixes() {
        assert_eq!(
            Unit::FlopsPerSecond.format(93_400_000_000.0),
            "93.4 GFLOP/s"
        );
        assert_eq!(
            Unit::FlopsPerSecond.format(110_941_664_811.0),
            "111 GFLOP/s"
        );
        assert_eq!(
            Unit::FlopsPerSecond.format_delta(-15_808_667_838.0),
            "-15.8 GFLOP/s"
        );
        assert_eq!(Unit::FlopsPerSecond.format(0.0), "0 FLOP/s");
        assert_eq!(Unit::FlopsPerSecond.format(999.96e12), "1 PFLOP/s");
        assert_eq!(Unit::Flops.format(1.2e12), "1.2 TFLOP");
        assert_eq!(Unit::Flops.format(512.0), "512 FLOP");
        assert_eq!(Unit::Flops.format(2.5e21), "2500 EFLOP");
        assert_eq!(Unit::Flops.format_delta(-3e6), "-3 MFLOP");
    }

    #[test]
    fn rates_are_per_second() {
        assert_eq!(Unit::PerSecond.format(54.4321), "54.4/s");
        assert_eq!(Unit::PerSecond.format(0.0), "0/s");
        assert_eq!(Unit::PerSecond.format_delta(-3.25), "-3.25/s");
        assert_eq!(Unit::BytesPerSecond.format(13_107_200.0), "12.5 MiB/s");
    }

    #[test]
    fn metrics_without_a_unit_keep_their_digits() {
        assert_eq!(format_metric(None, 0.41962361, 5), "0.41962");
        assert_eq!(format_metric(Some(Unit::Bytes), 2048.0, 5), "2 KiB");
        assert_eq!(format_metric_delta(None, 0.000101337888), "+0.000101");
        assert_eq!(format_metric_delta(None, -2.5), "-2.5");
        assert_eq!(format_metric_delta(None, -0.0), "0");
        assert_eq!(format_metric_delta(Some(Unit::Seconds), 0.5), "+500 ms");
        assert_eq!(format_percent(0.5), "+50%");
        assert_eq!(format_percent(-0.00024), "-0.024%");
        assert_eq!(format_percent(0.0123), "+1.2%");
        assert_eq!(format_percent(-0.14), "-14%");
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc_date_time(0), "1970-01-01 00:00:00");
        assert_eq!(utc_date_time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc_date_time(1_796_083_587_000), "2026-12-01 00:06:27");
    }
}
