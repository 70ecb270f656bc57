//! The errors of the client library. A gRPC failure keeps its code and message, so callers can
//! tell a rejected graph (`InvalidArgument`) from a full queue (`ResourceExhausted`) or a daemon
//! that went away (`Unavailable`), and the CLI can print the code by name.

use tonic::Code;

/// Every way a call to kilnd can fail.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The daemon URI is neither `unix:///path` nor `http(s)://host:port`.
    #[error("invalid daemon URI `{uri}`: {reason} (expected unix:///path, http://host:port or https://host:port)")]
    InvalidUri { uri: String, reason: String },

    /// A token or CA file could not be read.
    #[error("reading {path}: {reason}", path = path.display())]
    Credentials { path: std::path::PathBuf, reason: String },

    /// The token holds characters that cannot travel in gRPC metadata.
    #[error("the kilnd token holds characters that cannot travel in gRPC metadata")]
    InvalidToken,

    /// Nothing answered at the URI. The message tells the user how to point the client
    /// elsewhere, because the usual cause is a daemon that is not running or a wrong socket.
    #[error("cannot reach kilnd at {uri}: is kilnd running? (set KILN_DAEMON or --daemon): {cause}")]
    Unreachable { uri: String, cause: String },

    /// The daemon answered with a gRPC error, mid-stream included.
    #[error("{}: {message}", code_name(*.code))]
    Rpc { code: Code, message: String },

    /// The job as a whole could not finish (the daemon is shutting down, for example). Kernel
    /// results already received stay valid.
    #[error("job `{job_id}` failed: {reason}")]
    JobFailed { job_id: String, reason: String },

    /// The event stream ended before the job's `JobDone` event: the daemon closed the stream
    /// without an error status, which a healthy daemon never does.
    #[error("the event stream of job `{job_id}` ended before the job was done")]
    Incomplete { job_id: String },
}

impl ClientError {
    /// The gRPC code, for errors that came from the daemon.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        ClientError::Rpc { code: status.code(), message: status.message().to_owned() }
    }
}

/// The gRPC code as lowercase words, as users read it in `error: invalid argument: ...`: kiln-proto's
/// name of the code with spaces for underscores.
pub fn code_name(code: Code) -> String {
    kiln_proto::code::name(code).replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_keeps_code_and_message() {
        let err = ClientError::from(tonic::Status::invalid_argument("graph.kernels[0].cuda.source: empty"));
        assert_eq!(err.code(), Some(Code::InvalidArgument));
        assert_eq!(err.to_string(), "invalid argument: graph.kernels[0].cuda.source: empty");
    }

    #[test]
    fn unreachable_says_what_to_do() {
        let err = ClientError::Unreachable {
            uri: "unix:///tmp/x.sock".into(),
            cause: "No such file or directory (os error 2)".into(),
        };
        let text = err.to_string();
        assert!(text.starts_with("cannot reach kilnd at unix:///tmp/x.sock: is kilnd running?"));
        assert!(text.contains("KILN_DAEMON"));
        assert_eq!(err.code(), None);
    }
}
