//! What a pipeline file or pipe.config.yaml says about where stages run
//! (`executor:`), and the units Slurm reads.

use std::time::Duration;

use crate::settings::Places;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    Local,
    Slurm,
}

impl ExecutorKind {
    pub fn parse(text: &str) -> Option<ExecutorKind> {
        match text {
            "local" => Some(ExecutorKind::Local),
            "slurm" => Some(ExecutorKind::Slurm),
            _ => None,
        }
    }
}

/// What one source says about the executor; unset parts fall through.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecutorSpec {
    pub kind: Option<ExecutorKind>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// More `sbatch` options, each one argument (`--constraint=a100`).
    pub flags: Option<Vec<String>>,
    /// The longest wait between two looks at the queue.
    pub poll: Option<Duration>,
    /// Where each is written (`type`, `partition`, ...).
    pub places: Places,
}

/// `4G`, `512M`, `1.5GB`, `2T`, or a bare number of MiB (Slurm's `--mem`
/// convention), in MiB rounded up.
pub fn parse_memory_mb(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n > 0.0)?;
    let factor = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "M" | "MB" | "MIB" => 1.0,
        "K" | "KB" | "KIB" => 1.0 / 1024.0,
        "G" | "GB" | "GIB" => 1024.0,
        "T" | "TB" | "TIB" => 1024.0 * 1024.0,
        _ => return None,
    };
    let mb = (number * factor).ceil();
    (1.0..1e12).contains(&mb).then_some(mb as u64)
}

/// A time limit: `90s`, `30m`, `2h`, `1d`, `1h30m`, Slurm's own forms
/// (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`), a bare
/// number being minutes as in `sbatch --time`. In seconds.
pub fn parse_time_limit_s(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.chars().any(|ch| ch.is_ascii_alphabetic()) {
        return parse_suffixed_duration(text).map(|duration| duration.as_secs());
    }
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (Some(days.parse::<u64>().ok()?), clock),
        None => (None, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|part| part.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let seconds = match (days, parts.as_slice()) {
        (None, [minutes]) => minutes * 60,
        (None, [minutes, seconds]) => minutes * 60 + seconds,
        (None, [hours, minutes, seconds]) => hours * 3600 + minutes * 60 + seconds,
        (Some(days), [hours]) => days * 86400 + hours * 3600,
        (Some(days), [hours, minutes]) => days * 86400 + hours * 3600 + minutes * 60,
        (Some(days), [hours, minutes, seconds]) => {
            days * 86400 + hours * 3600 + minutes * 60 + seconds
        }
        _ => return None,
    };
    (seconds > 0).then_some(seconds)
}

/// `500ms`, `2s`, `1m30s`, `2h`, `1d`.
pub fn parse_suffixed_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let split = rest
            .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        let number: f64 = number.parse().ok().filter(|n: &f64| n.is_finite())?;
        let unit_len = tail
            .find(|ch: char| !ch.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(number * seconds).ok()?;
        rest = tail;
    }
    (total > Duration::ZERO).then_some(total)
}

/// Seconds as Slurm's `--time` reads them, rounded up to whole minutes
/// (Slurm's granularity): `D-HH:MM:00`.
pub fn slurm_time(seconds: u64) -> String {
    let minutes = seconds.div_ceil(60);
    let (days, minutes) = (minutes / 1440, minutes % 1440);
    format!("{days}-{:02}:{:02}:00", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units_follow_slurm() {
        assert_eq!(parse_memory_mb("4G"), Some(4096));
        assert_eq!(parse_memory_mb("1.5GB"), Some(1536));
        assert_eq!(parse_memory_mb("512"), Some(512));
        assert_eq!(parse_memory_mb("512M"), Some(512));
        assert_eq!(parse_memory_mb("1T"), Some(1024 * 1024));
        assert_eq!(parse_memory_mb("100K"), Some(1));
        assert_eq!(parse_memory_mb("4 G"), Some(4096));
        for bad in ["", "G", "-4G", "4X", "0", "1e400G", "nanG"] {
            assert_eq!(parse_memory_mb(bad), None, "{bad}");
        }
    }

    #[test]
    fn time_limits_read_both_forms() {
        assert_eq!(parse_time_limit_s("90s"), Some(90));
        assert_eq!(parse_time_limit_s("1h30m"), Some(5400));
        assert_eq!(parse_time_limit_s("2d"), Some(172_800));
        assert_eq!(parse_time_limit_s("30"), Some(1800));
        assert_eq!(parse_time_limit_s("10:30"), Some(630));
        assert_eq!(parse_time_limit_s("01:00:00"), Some(3600));
        assert_eq!(parse_time_limit_s("1-12"), Some(129_600));
        assert_eq!(parse_time_limit_s("1-00:30:00"), Some(88_200));
        for bad in ["", "0", "x", "1:2:3:4", "1y", "-5", "1-", "h"] {
            assert_eq!(parse_time_limit_s(bad), None, "{bad}");
        }
        assert_eq!(slurm_time(90), "0-00:02:00");
        assert_eq!(slurm_time(88_200), "1-00:30:00");
    }
}
