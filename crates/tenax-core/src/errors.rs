//! Errors as the log and the answers show them.

/// An error and its causes, one after the other. A cause whose words the text already holds
/// is left out: many errors (tokio-postgres's, reqwest's) print their source themselves, and
/// `db error: FATAL: …: db error: FATAL: …` says nothing twice as well.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;

    /// An error that prints its own source, as tokio-postgres's do.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "db error: {}", self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_follow_once() {
        let inner = std::io::Error::other("FATAL: database \"x\" does not exist");
        assert_eq!(
            chain(&Outer(inner)),
            "db error: FATAL: database \"x\" does not exist"
        );
        let unsaid = Unsaid(std::io::Error::other("no such file"));
        assert_eq!(chain(&unsaid), "reading the file: no such file");
    }

    /// An error whose source is not in its own text.
    #[derive(Debug)]
    struct Unsaid(std::io::Error);

    impl fmt::Display for Unsaid {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("reading the file")
        }
    }

    impl std::error::Error for Unsaid {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
