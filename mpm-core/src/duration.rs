//! Durations as people write them in flags and files: `5`, `2.5s`,
//! `500ms`, `2m`.

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

/// A duration given as seconds (`5`, `2.5`) or with a unit (`500ms`, `5s`, `2m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else {
            (t, 1.0)
        };
        let value: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a duration (try 5, 2.5s or 500ms)"))?;
        if !value.is_finite() || value < 0.0 || value * scale > 1e9 {
            return Err(format!("'{s}' is not a duration (try 5, 2.5s or 500ms)"));
        }
        Ok(Seconds(Duration::from_secs_f64(value * scale)))
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Float(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Seconds(Duration::from_secs(n))),
            Raw::Float(f) => f.to_string().parse().map_err(serde::de::Error::custom),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_seconds() {
        assert_eq!("5".parse::<Seconds>().unwrap().0, Duration::from_secs(5));
        assert_eq!(
            "250ms".parse::<Seconds>().unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!("2m".parse::<Seconds>().unwrap().0, Duration::from_secs(120));
        assert!("soon".parse::<Seconds>().is_err());
        assert!("-1".parse::<Seconds>().is_err());
    }
}
