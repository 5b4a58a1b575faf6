//! Human durations on the command line: `500ms`, `30s`, `5m`, `2h`, `7d`, or combinations like `1h30m`.

use std::time::Duration;

/// Parses a duration such as `30s`, `1500ms`, `1h30m` or `7d`. A bare number is seconds.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s.starts_with('-') {
        return Err(format!(
            "negative duration {s:?}: durations must be positive"
        ));
    }
    if s.chars().all(|c| c.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|e| format!("duration {s:?}: {e}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("duration {s:?}: expected a number before {rest:?}"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|e| format!("duration {s:?}: {e}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => {
                return Err(format!(
                    "duration {s:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
                ));
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// Formats a duration for people: `2h 5m`, `41.2s`, `350ms`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        let (days, h, m, sec) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
        match (days, h) {
            (0, 0) => format!("{m}m {sec}s"),
            (0, _) => format!("{h}h {m}m"),
            _ => format!("{days}d {h}h"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("45"), Ok(Duration::from_secs(45)));
        assert!(parse("-5s").is_err());
        assert!(parse("5 parsecs").is_err());
        assert!(parse("").is_err());
        assert!(parse("s").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(human(Duration::from_millis(350)), "350ms");
        assert_eq!(human(Duration::from_millis(41_200)), "41.2s");
        assert_eq!(human(Duration::from_secs(7_500)), "2h 5m");
        assert_eq!(human(Duration::from_secs(3 * 86_400 + 3600)), "3d 1h");
    }
}
