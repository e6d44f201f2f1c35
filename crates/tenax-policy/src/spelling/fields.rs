//! Reading a JSON object field by field, refusing unknown keys, with errors that name the path.

use serde_json::{Map, Value};

use crate::duration::{duration_from_json, json_kind, seconds_from_json};
use crate::error::PolicyError;

/// One JSON object being read. Every key read is remembered; [`Fields::finish`] refuses the rest,
/// so a misspelt parameter is an error rather than a silently ignored default.
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// Dotted path of this object in the input ("" at the top).
    path: String,
    read: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    pub fn new(value: &'a Value, path: &str) -> Result<Self, PolicyError> {
        match value {
            Value::Object(map) => Ok(Self {
                map,
                path: path.to_owned(),
                read: Vec::new(),
            }),
            other => Err(PolicyError::new(
                path,
                format!("must be a JSON object, got {}", json_kind(other)),
            )),
        }
    }

    /// The full path of `key`, for error messages.
    pub fn path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The raw value of `key`, if present and not null.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.read.push(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// A duration: milliseconds or a human string (native spelling).
    pub fn duration(&mut self, key: &'static str) -> Result<Option<u64>, PolicyError> {
        let path = self.path(key);
        self.get(key)
            .map(|v| duration_from_json(&path, v))
            .transpose()
    }

    /// A duration in seconds (SNS and Zaqar spellings).
    pub fn seconds(&mut self, key: &'static str) -> Result<Option<u64>, PolicyError> {
        let path = self.path(key);
        self.get(key)
            .map(|v| seconds_from_json(&path, v))
            .transpose()
    }

    /// A non-negative integer count that fits in `u32`.
    pub fn count(&mut self, key: &'static str) -> Result<Option<u32>, PolicyError> {
        let path = self.path(key);
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        if let Some(n) = value.as_u64() {
            return u32::try_from(n).map(Some).map_err(|_| {
                PolicyError::new(path, format!("must be at most {}, got {n}", u32::MAX))
            });
        }
        // 3.0 is accepted as 3 (JSON writers differ); 3.5 or -1 are not counts.
        match value.as_f64() {
            Some(x) if x.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&x) => {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let n = x as u32;
                Ok(Some(n))
            }
            Some(x) if x < 0.0 => Err(PolicyError::new(
                path,
                format!("must be at least 0, got {value}"),
            )),
            _ => Err(PolicyError::new(
                path,
                format!("must be a whole number, got {}", json_kind(value)),
            )),
        }
    }

    /// A finite number within `range`, described by `rule` when it is not.
    pub fn number(
        &mut self,
        key: &'static str,
        range: std::ops::RangeInclusive<f64>,
        rule: &str,
    ) -> Result<Option<f64>, PolicyError> {
        let path = self.path(key);
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match value.as_f64() {
            Some(x) if x.is_finite() && range.contains(&x) => Ok(Some(x)),
            Some(_) => Err(PolicyError::new(path, format!("{rule}, got {value}"))),
            None => Err(PolicyError::new(
                path,
                format!("must be a number, got {}", json_kind(value)),
            )),
        }
    }

    pub fn string(&mut self, key: &'static str) -> Result<Option<&'a str>, PolicyError> {
        let path = self.path(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(PolicyError::new(
                path,
                format!("must be a string, got {}", json_kind(other)),
            )),
        }
    }

    pub fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, PolicyError> {
        let path = self.path(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(PolicyError::new(
                path,
                format!("must be true or false, got {}", json_kind(other)),
            )),
        }
    }

    /// Marks keys as known without reading them (fields a spelling accepts and ignores).
    pub fn ignore(&mut self, keys: &[&'static str]) {
        self.read.extend_from_slice(keys);
    }

    /// Refuses any key that was not read.
    pub fn finish(self) -> Result<(), PolicyError> {
        let mut unknown: Vec<&String> = self
            .map
            .keys()
            .filter(|k| !self.read.contains(&k.as_str()))
            .collect();
        unknown.sort();
        match unknown.first() {
            None => Ok(()),
            Some(key) => {
                let mut known: Vec<&str> = self.read.clone();
                known.sort_unstable();
                known.dedup();
                Err(PolicyError::new(
                    self.path(key),
                    format!("unknown field (known fields here: {})", known.join(", ")),
                ))
            }
        }
    }
}
