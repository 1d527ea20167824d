//! The usage error every command reports for bad input: one line on stderr, exit status 2. A leaf
//! module, so that the commands and the plans can share it without importing one another.
//!
//! ```
//! let e = locklab_bench::usage::UsageError("--threads: expected a number".into());
//! assert_eq!(e.to_string(), "--threads: expected a number");
//! ```

/// A usage error: printed as one line, exit status 2.
///
/// ```
/// let e = locklab_bench::usage::UsageError("bad flag".into());
/// assert_eq!(format!("{e}"), "bad flag");
/// ```
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `Err(UsageError(msg))`.
pub(crate) fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}
