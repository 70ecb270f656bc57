//! gRPC status codes by name: kiln-cache's `code` metric label and the `kiln` CLI's error
//! messages read the same names.

use tonic::Code;

/// The code's name in snake case, as gRPC spells it but lowercase: `invalid_argument`,
/// `unavailable`. (`Code`'s own `Display` prints a sentence such as "Client specified an invalid
/// argument".)
pub fn name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_grpcs_in_lowercase() {
        for n in 0..=16 {
            let code = Code::from_i32(n);
            assert_eq!(name(code).replace('_', ""), format!("{code:?}").to_lowercase());
        }
    }
}
