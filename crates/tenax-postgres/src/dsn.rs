//! The keywords of a database URL or connection string that Tenax reads itself, taken out
//! before tokio-postgres reads the rest: tokio-postgres knows `sslmode` only as `disable`,
//! `prefer` and `require`, and neither `verify-ca`, `verify-full` nor `sslrootcert`.
//!
//! Both spellings libpq accepts are read as tokio-postgres reads them: a `postgres://` (or
//! `postgresql://`) URL, whose keywords are in its query (after the first `?` that follows the
//! credentials), percent-encoded; and a `key=value` string, whose values may be quoted with
//! `'` and escape any character with `\`. What is not taken out is passed on unchanged (the
//! URL's text as it was; a string's pairs quoted again), so tokio-postgres's own errors still
//! name what is wrong with it.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// A URL or connection string, with `sslmode` and `sslrootcert` apart from the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The URL or string without the taken keywords, for tokio-postgres.
    pub rest: String,
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    /// Every keyword the text names (decoded), taken or not.
    pub keywords: Vec<String>,
}

/// Splits `text`; `Err` only for a string this reader cannot take apart (tokio-postgres's error
/// for it is the clearer one, so the caller asks tokio-postgres).
pub fn split(text: &str) -> Result<Split, ()> {
    match url_body(text) {
        Some(start) => split_url(text, start),
        None => split_pairs(text),
    }
}

/// Where a URL's body starts (after its scheme), or `None` when `text` is not a URL.
fn url_body(text: &str) -> Option<usize> {
    ["postgres://", "postgresql://"]
        .into_iter()
        .find(|prefix| text.starts_with(prefix))
        .map(str::len)
}

fn split_url(text: &str, start: usize) -> Result<Split, ()> {
    let body = &text[start..];
    // tokio-postgres takes the credentials up to the first `@` anywhere, then the host up to
    // the first `/` or `?`: the query starts at the first `?` after the credentials.
    let after_credentials = body.find('@').map_or(0, |at| at + 1);
    let Some(question) = body[after_credentials..].find('?') else {
        return Ok(Split {
            rest: text.to_owned(),
            sslmode: None,
            sslrootcert: None,
            keywords: Vec::new(),
        });
    };
    let query_at = start + after_credentials + question;
    let mut split = Split {
        rest: String::new(),
        sslmode: None,
        sslrootcert: None,
        keywords: Vec::new(),
    };
    let mut kept = Vec::new();
    for pair in text[query_at + 1..].split('&') {
        let (key, value) = pair.split_once('=').ok_or(())?;
        let key = decode(key)?;
        if !split.take(&key, || decode(value).map(Cow::into_owned))? {
            kept.push(pair);
        }
        split.keywords.push(key.into_owned());
    }
    split.rest = text[..query_at].to_owned();
    if !kept.is_empty() {
        split.rest.push('?');
        split.rest.push_str(&kept.join("&"));
    }
    Ok(split)
}

fn decode(text: &str) -> Result<Cow<'_, str>, ()> {
    percent_decode_str(text).decode_utf8().map_err(|_| ())
}

fn split_pairs(text: &str) -> Result<Split, ()> {
    let mut split = Split {
        rest: String::new(),
        sslmode: None,
        sslrootcert: None,
        keywords: Vec::new(),
    };
    let mut kept = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            break;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(());
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next().ok_or(())? {
                    '\'' => break,
                    '\\' => value.push(chars.next().ok_or(())?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                match c {
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
            if value.is_empty() {
                return Err(());
            }
        }
        if !split.take(&key, || Ok(value.clone()))? {
            kept.push(format!("{key}='{}'", quote(&value)));
        }
        split.keywords.push(key);
    }
    split.rest = kept.join(" ");
    Ok(split)
}

/// `value` escaped for a quoted value of a connection string.
fn quote(value: &str) -> String {
    value.replace('\\', r"\\").replace('\'', r"\'")
}

impl Split {
    /// Keeps `key`'s value if it is a taken keyword (the last one given wins, as in libpq);
    /// whether it is.
    fn take(&mut self, key: &str, value: impl FnOnce() -> Result<String, ()>) -> Result<bool, ()> {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            _ => return Ok(false),
        };
        *slot = Some(value()?);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest_parses(split: &Split) -> tokio_postgres::Config {
        split
            .rest
            .parse()
            .unwrap_or_else(|e| panic!("{:?}: {e}", split.rest))
    }

    #[test]
    fn urls_lose_only_the_taken_keywords() {
        let url =
            split("postgres://u:p%3Fw@db.internal:6432/tenax?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca%20b.pem")
                .unwrap();
        assert_eq!(url.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(url.sslrootcert.as_deref(), Some("/etc/ca b.pem"));
        assert_eq!(
            url.rest,
            "postgres://u:p%3Fw@db.internal:6432/tenax?application_name=x"
        );
        assert_eq!(url.keywords, ["sslmode", "application_name", "sslrootcert"]);
        let config = rest_parses(&url);
        assert_eq!(config.get_application_name(), Some("x"));
        assert_eq!(config.get_dbname(), Some("tenax"));

        let only = split("postgresql://db/tenax?sslmode=require").unwrap();
        assert_eq!(only.rest, "postgresql://db/tenax");
        assert_eq!(only.sslmode.as_deref(), Some("require"));
        rest_parses(&only);

        // Several hosts: the host list is passed on as it is.
        let hosts = split(
            "postgres://u@db1:5432,db2:5433/tenax?sslmode=require&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            hosts.rest,
            "postgres://u@db1:5432,db2:5433/tenax?target_session_attrs=read-write"
        );
        assert_eq!(rest_parses(&hosts).get_ports(), [5432, 5433]);

        let none = split("postgres://db/tenax").unwrap();
        assert_eq!(none.rest, "postgres://db/tenax");
        assert_eq!(none.sslmode, None);
        // A `?` in the credentials is not the query (tokio-postgres reads it so too).
        let odd = split("postgres://u:a?b@db/tenax?sslmode=disable").unwrap();
        assert_eq!(odd.rest, "postgres://u:a?b@db/tenax");
        assert_eq!(odd.sslmode.as_deref(), Some("disable"));
        assert!(split("postgres://db/tenax?sslmode").is_err());
    }

    #[test]
    fn connection_strings_lose_only_the_taken_keywords() {
        let pairs = split(
            r"host=db.internal  user = tenax sslmode=verify-ca password='it''s' sslrootcert='/etc/my ca.pem' application_name=a\ b",
        );
        // `'it''s'` is not libpq's quoting: the reader stops where tokio-postgres would.
        assert!(pairs.is_err());

        let pairs = split(
            r"host=db.internal  user = tenax sslmode=verify-ca password='it\'s \\ x' sslrootcert='/etc/my ca.pem' application_name=a\ b",
        )
        .unwrap();
        assert_eq!(pairs.sslmode.as_deref(), Some("verify-ca"));
        assert_eq!(pairs.sslrootcert.as_deref(), Some("/etc/my ca.pem"));
        let config = rest_parses(&pairs);
        assert_eq!(config.get_user(), Some("tenax"));
        assert_eq!(config.get_password(), Some(&br"it's \ x"[..]));
        assert_eq!(config.get_application_name(), Some("a b"));
        assert_eq!(
            pairs.keywords,
            [
                "host",
                "user",
                "sslmode",
                "password",
                "sslrootcert",
                "application_name"
            ]
        );
        assert!(split("host=db sslmode=").is_err());
        assert!(split("host=db sslrootcert='unterminated").is_err());
        assert_eq!(split("").unwrap().rest, "");
    }
}
