//! One error type for every backend, carrying what happened and whether retrying can help.

use std::fmt;

/// The result type of every fallible batchbridge operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is.
///
/// Callers branch on the kind (and on [`Error::is_temporary`]), never on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The job spec or another input was rejected before anything was sent anywhere.
    InvalidInput,
    /// The backend cannot do what was asked (e.g. containers on a backend without a runtime).
    Unsupported,
    /// The scheduler refused the request (an unknown partition, a submit limit, a drained
    /// partition, a malformed option); [`Error::refusal`] says which kind of refusal it is,
    /// when the backend could tell, and whether it is temporary follows from that.
    Rejected,
    /// No job with that id exists.
    NotFound,
    /// The caller is not allowed to do this on the cluster (e.g. cancelling another user's job).
    PermissionDenied,
    /// The host could not be reached: refused, timed out, unresolvable.
    Unreachable,
    /// The host presented a key that the known hosts do not vouch for.
    HostKeyMismatch,
    /// The credentials were refused.
    AuthenticationFailed,
    /// The credential has expired (an SSH certificate past its validity), so it was not
    /// even offered: the same credential fails for good, a renewed one is tried at once.
    CredentialExpired,
    /// An established connection broke; the command may or may not have run.
    ConnectionLost,
    /// A command did not finish within its time limit.
    Timeout,
    /// A remote command failed in a way the backend does not recognise.
    CommandFailed,
    /// A scheduler answered with output the backend cannot parse.
    UnexpectedOutput,
    /// A submit whose outcome is not known: verify with `find`, never blindly resubmit.
    SubmitOutcomeUnknown,
    /// A local I/O failure (state directory, process spawn).
    Io,
    /// A wait for a job ([`Tracker::wait`](crate::Tracker::wait)) reached its time limit
    /// before the job ended. The job goes on, untouched: waiting again can still see it end,
    /// so the error is temporary. Distinct from [`Timeout`](Self::Timeout), a command cut
    /// off at its time limit, so that a caller can tell "still running" from "the cluster
    /// did not answer".
    WaitTimedOut,
    /// The job is still active (or its state is not known), so it cannot be cleaned up:
    /// cancel it and wait until it ends first.
    JobActive,
    /// The login needs a person at a terminal (a password or one-time password typed in)
    /// and no such login is open: nothing that runs unattended may prompt, so the caller
    /// has to open one interactively (the CLI's `batchbridge login`) and try again.
    LoginRequired,
}

impl ErrorKind {
    /// Whether errors of this kind are worth retrying unless the error says otherwise.
    pub const fn is_temporary_by_default(self) -> bool {
        matches!(
            self,
            Self::Unreachable
                | Self::ConnectionLost
                | Self::Timeout
                | Self::SubmitOutcomeUnknown
                | Self::Io
                | Self::WaitTimedOut
        )
    }

    const fn describe(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid input",
            Self::Unsupported => "unsupported",
            Self::Rejected => "rejected by the scheduler",
            Self::NotFound => "not found",
            Self::PermissionDenied => "permission denied",
            Self::Unreachable => "host unreachable",
            Self::HostKeyMismatch => "host key verification failed",
            Self::AuthenticationFailed => "authentication failed",
            Self::CredentialExpired => "credential expired",
            Self::ConnectionLost => "connection lost",
            Self::Timeout => "timed out",
            Self::CommandFailed => "command failed",
            Self::UnexpectedOutput => "unexpected scheduler output",
            Self::SubmitOutcomeUnknown => "submit outcome unknown",
            Self::Io => "I/O error",
            Self::WaitTimedOut => "wait timed out",
            Self::JobActive => "job still active",
            Self::LoginRequired => "interactive login required",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Why a scheduler refused a submit ([`ErrorKind::Rejected`]), in one vocabulary for every
/// backend: each backend reads it out of its scheduler's own words, so that code above the
/// backends (retry policies, the operator's reasons) never matches a scheduler's message.
///
/// ```
/// use batchbridge_core::{Error, ErrorKind, Refusal};
///
/// let err = Error::new(ErrorKind::Rejected, "QOSMaxSubmitJobPerUserLimit")
///     .with_refusal(Refusal::SubmitLimit);
/// assert!(err.is_temporary());
/// assert_eq!(err.refusal(), Some(Refusal::SubmitLimit));
/// assert_eq!(Refusal::SubmitLimit.as_str(), "SubmitLimit");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// A limit on how many jobs a user, account or QOS may have in the scheduler was
    /// reached (SLURM QOS and association submit limits, PBS `max_queued`, HTCondor
    /// `MAX_JOBS_PER_OWNER` and `MAX_JOBS_SUBMITTED`): the same submit passes once some of
    /// those jobs end. A [`Tracker`](crate::Tracker) holds such a job instead of failing it.
    SubmitLimit,
    /// The partition or queue takes no jobs now (drained, down, disabled, stopped): the
    /// same submit passes once an administrator opens it again.
    QueueClosed,
    /// The request is wrong for this cluster (an unknown partition, queue, account or QOS,
    /// an option the scheduler does not accept): the same submit fails again.
    InvalidRequest,
}

impl Refusal {
    /// Every kind, in declaration order.
    pub const ALL: &[Self] = &[Self::SubmitLimit, Self::QueueClosed, Self::InvalidRequest];

    /// Whether the same submit can pass later without a change to the request.
    pub const fn is_temporary(self) -> bool {
        matches!(self, Self::SubmitLimit | Self::QueueClosed)
    }

    /// The kind of the first of `words` (a backend's table of its scheduler's phrases, each
    /// with its kind) that `message` contains; `None` when none does.
    ///
    /// ```
    /// use batchbridge_core::Refusal;
    ///
    /// const WORDS: &[(&str, Refusal)] = &[("job limit", Refusal::SubmitLimit)];
    /// let stderr = "error: job limit reached for user alice";
    /// assert_eq!(Refusal::named_in(stderr, WORDS), Some(Refusal::SubmitLimit));
    /// assert_eq!(Refusal::named_in("error: something else", WORDS), None);
    /// ```
    pub fn named_in(message: &str, words: &[(&str, Self)]) -> Option<Self> {
        words
            .iter()
            .find(|(phrase, _)| message.contains(phrase))
            .map(|(_, refusal)| *refusal)
    }

    /// The stable name, for programs and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SubmitLimit => "SubmitLimit",
            Self::QueueClosed => "QueueClosed",
            Self::InvalidRequest => "InvalidRequest",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A batchbridge error: a [`ErrorKind`], a message for humans, an optional source, and
/// whether retrying the same call can help.
///
/// ```
/// use batchbridge_core::{Error, ErrorKind};
///
/// let err = Error::new(ErrorKind::Unreachable, "cluster.example.org:22: connection refused");
/// assert!(err.is_temporary());
/// assert_eq!(err.kind(), ErrorKind::Unreachable);
/// assert_eq!(err.to_string(), "host unreachable: cluster.example.org:22: connection refused");
///
/// let err = Error::new(ErrorKind::Rejected, "invalid partition specified: gpu").permanent();
/// assert!(!err.is_temporary());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    temporary: bool,
    refusal: Option<Refusal>,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    /// A new error whose temporary flag is the kind's default.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            temporary: kind.is_temporary_by_default(),
            refusal: None,
            source: None,
        }
    }

    /// Shorthand for an [`ErrorKind::InvalidInput`] error.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Marks the error as worth retrying.
    pub fn temporary(mut self) -> Self {
        self.temporary = true;
        self
    }

    /// Marks the error as not worth retrying.
    pub fn permanent(mut self) -> Self {
        self.temporary = false;
        self
    }

    /// Says which kind of refusal this is, and makes the error temporary or permanent as
    /// that kind is.
    pub fn with_refusal(mut self, refusal: Refusal) -> Self {
        self.refusal = Some(refusal);
        self.temporary = refusal.is_temporary();
        self
    }

    /// The kind of refusal, for a [`Rejected`](ErrorKind::Rejected) error whose backend
    /// could tell.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the same call may succeed if retried later.
    pub fn is_temporary(&self) -> bool {
        self.temporary
    }

    /// This error again, for another caller of one shared call (a batch's jobs, the
    /// waiters of one submit): its kind, message, refusal and temporary flag. Its source
    /// stays with the first: a source cannot be cloned.
    pub(crate) fn again(&self) -> Self {
        Self {
            kind: self.kind,
            message: self.message.clone(),
            temporary: self.temporary,
            refusal: self.refusal,
            source: None,
        }
    }
}

/// The most bytes of a program's output or of a caller's input that an error message
/// quotes: a scheduler may echo a 100 KB option back (sbatch does with `--begin`), and a
/// message that long is no use to a reader, and too long for where messages go (the
/// operator copies one into a BatchJob's status three times; a Kubernetes condition's
/// message is meant to stay under 32 KiB).
pub const MAX_QUOTED: usize = 2048;

/// `text` as an error message quotes it: whole up to [`MAX_QUOTED`] bytes, else its first
/// [`MAX_QUOTED`] bytes (cut on a character boundary) and how many bytes were left out.
///
/// ```
/// use batchbridge_core::error::{MAX_QUOTED, excerpt};
///
/// assert_eq!(excerpt("short"), "short");
/// let megabyte = "x".repeat(1 << 20);
/// let long = excerpt(&megabyte);
/// assert!(long.len() < MAX_QUOTED + 40, "{}", long.len());
/// assert!(long.ends_with("… (1046528 more bytes)"), "{long}");
/// ```
pub fn excerpt(text: &str) -> std::borrow::Cow<'_, str> {
    let kept = truncate(text, MAX_QUOTED);
    if kept.len() == text.len() {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(format!("{kept}… ({} more bytes)", text.len() - kept.len()))
}

/// The longest start of `text` at most `max` bytes long, cut on a character boundary: for
/// a limit in bytes (a quoted excerpt, a name a scheduler stores) on text that may hold
/// characters of several bytes.
///
/// ```
/// use batchbridge_core::error::truncate;
///
/// assert_eq!(truncate("short", 40), "short");
/// assert_eq!(truncate("ab\u{e9}", 3), "ab", "é takes two bytes: not cut in half");
/// ```
pub fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        Self::new(ErrorKind::Io, err.to_string()).with_source(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_defaults_follow_the_kind() {
        let cases = [
            (ErrorKind::InvalidInput, false),
            (ErrorKind::Unsupported, false),
            (ErrorKind::Rejected, false),
            (ErrorKind::NotFound, false),
            (ErrorKind::PermissionDenied, false),
            (ErrorKind::Unreachable, true),
            (ErrorKind::HostKeyMismatch, false),
            (ErrorKind::AuthenticationFailed, false),
            (ErrorKind::ConnectionLost, true),
            (ErrorKind::Timeout, true),
            (ErrorKind::CommandFailed, false),
            (ErrorKind::UnexpectedOutput, false),
            (ErrorKind::SubmitOutcomeUnknown, true),
            (ErrorKind::Io, true),
            (ErrorKind::WaitTimedOut, true),
        ];
        for (kind, temporary) in cases {
            assert_eq!(Error::new(kind, "x").is_temporary(), temporary, "{kind:?}");
        }
    }

    #[test]
    fn excerpts_are_bounded_and_cut_on_character_boundaries() {
        assert_eq!(excerpt(""), "");
        let exact = "y".repeat(MAX_QUOTED);
        assert_eq!(
            excerpt(&exact),
            exact.as_str(),
            "the limit itself is kept whole"
        );
        // 'é' is two bytes: the cut falls inside one and moves back before it.
        let accented = format!("a{}", "é".repeat(MAX_QUOTED));
        let cut = excerpt(&accented);
        let kept = cut.split('…').next().unwrap();
        assert_eq!(kept.len(), MAX_QUOTED - 1, "{}", kept.len());
        assert!(cut.ends_with(&format!("({} more bytes)", accented.len() - kept.len())));
    }

    #[test]
    fn refusals_set_the_temporary_flag_and_have_stable_names() {
        let cases = [
            (Refusal::SubmitLimit, true, "SubmitLimit"),
            (Refusal::QueueClosed, true, "QueueClosed"),
            (Refusal::InvalidRequest, false, "InvalidRequest"),
        ];
        assert_eq!(cases.len(), Refusal::ALL.len());
        for (refusal, temporary, name) in cases {
            let err = Error::new(ErrorKind::Rejected, "x").with_refusal(refusal);
            assert_eq!(err.is_temporary(), temporary, "{refusal:?}");
            assert_eq!(err.refusal(), Some(refusal));
            assert_eq!(refusal.to_string(), name);
        }
        assert_eq!(Error::new(ErrorKind::Rejected, "x").refusal(), None);
    }

    #[test]
    fn flags_can_be_overridden_and_sources_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let err = Error::from(io).permanent();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(!err.is_temporary());
        assert!(std::error::Error::source(&err).is_some());
        assert!(
            Error::new(ErrorKind::Rejected, "quota")
                .temporary()
                .is_temporary()
        );
    }
}
