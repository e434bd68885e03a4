//! Typed errors shared by master, worker and clients.
//!
//! One mapping per edge: `FsError` <-> `tonic::Status` (here, via an `ErrorDetail`
//! carried in the status details), `FsError` -> errno (FUSE), -> IOException (JNI).

use prost::Message;

use crate::proto::ErrorDetail;

pub type FsResult<T> = Result<T, FsError>;

/// Stable numeric codes; they travel on the wire, so never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    Internal = 1,
    NotFound = 2,
    AlreadyExists = 3,
    NotADirectory = 4,
    IsADirectory = 5,
    DirectoryNotEmpty = 6,
    PermissionDenied = 7,
    NoSpace = 8,
    InvalidArgument = 9,
    InvalidPath = 10,
    NameTooLong = 11,
    ChecksumMismatch = 12,
    Io = 13,
    Timeout = 14,
    Unavailable = 15,
    NotLeader = 16,
    FileIncomplete = 17,
    Protocol = 18,
    Config = 19,
    NoSuchXattr = 20,
    NotASymlink = 21,
    BlockNotFound = 22,
    Unauthenticated = 23,
    Busy = 24,
    CrossDevice = 25,
    NotPermitted = 26,
    UnderStore = 27,
    ReadOnly = 28,
    ReplicasUnknown = 29,
}

impl ErrorCode {
    pub fn from_u32(v: u32) -> ErrorCode {
        use ErrorCode::*;
        match v {
            2 => NotFound,
            3 => AlreadyExists,
            4 => NotADirectory,
            5 => IsADirectory,
            6 => DirectoryNotEmpty,
            7 => PermissionDenied,
            8 => NoSpace,
            9 => InvalidArgument,
            10 => InvalidPath,
            11 => NameTooLong,
            12 => ChecksumMismatch,
            13 => Io,
            14 => Timeout,
            15 => Unavailable,
            16 => NotLeader,
            17 => FileIncomplete,
            18 => Protocol,
            19 => Config,
            20 => NoSuchXattr,
            21 => NotASymlink,
            22 => BlockNotFound,
            23 => Unauthenticated,
            24 => Busy,
            25 => CrossDevice,
            26 => NotPermitted,
            27 => UnderStore,
            28 => ReadOnly,
            29 => ReplicasUnknown,
            _ => Internal,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum FsError {
    #[error("{path}: no such file or directory")]
    NotFound { path: String },
    #[error("{path}: already exists")]
    AlreadyExists { path: String },
    #[error("{path}: not a directory")]
    NotADirectory { path: String },
    #[error("{path}: is a directory")]
    IsADirectory { path: String },
    #[error("{path}: directory not empty")]
    DirectoryNotEmpty { path: String },
    #[error("{path}: permission denied")]
    PermissionDenied { path: String },
    #[error("no space left: {message}")]
    NoSpace { message: String },
    #[error("invalid argument: {message}")]
    InvalidArgument { message: String },
    #[error("invalid path {path:?}: {message}")]
    InvalidPath { path: String, message: String },
    #[error("{path}: file name too long")]
    NameTooLong { path: String },
    #[error("checksum mismatch in block {block_id} from worker {worker}: {message}")]
    ChecksumMismatch {
        block_id: u64,
        worker: String,
        message: String,
    },
    #[error("i/o error: {message}")]
    Io { message: String },
    #[error("timed out: {message}")]
    Timeout { message: String },
    #[error("unavailable: {message}")]
    Unavailable { message: String },
    #[error("not the leader (leader: {leader})")]
    NotLeader { leader: String },
    #[error("{path}: file is not complete (still being written)")]
    FileIncomplete { path: String },
    #[error("protocol error: {message}")]
    Protocol { message: String },
    #[error("config error: {message}")]
    Config { message: String },
    #[error("{path}: no such attribute")]
    NoSuchXattr { path: String },
    #[error("{path}: not a symbolic link")]
    NotASymlink { path: String },
    #[error("block {block_id} not found on worker {worker}")]
    BlockNotFound { block_id: u64, worker: String },
    #[error("unauthenticated: {message}")]
    Unauthenticated { message: String },
    #[error("busy: {message}")]
    Busy { message: String },
    #[error("{path}: cross-device link")]
    CrossDevice { path: String },
    /// The operation is reserved (EPERM), e.g. device files for non-root.
    #[error("{path}: operation not permitted")]
    NotPermitted { path: String },
    /// A write under a read-only mount (EROFS).
    #[error("{path}: read-only file system (the mount is read-only)")]
    ReadOnly { path: String },
    /// An under-store (a mount's S3 bucket, directory...) failed or refused a call.
    #[error("under-store {store}: {key}: {message}")]
    UnderStore {
        store: String,
        key: String,
        message: String,
    },
    /// A master that has just started or become leader has not yet heard from every
    /// worker where the block is (`master.worker_report_grace`): try again shortly.
    #[error("{path}: block {block_id} is not located yet: {message}")]
    ReplicasUnknown {
        path: String,
        block_id: u64,
        message: String,
    },
    #[error("internal error: {message}")]
    Internal { message: String },
}

impl FsError {
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::NotFound { .. } => ErrorCode::NotFound,
            FsError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            FsError::NotADirectory { .. } => ErrorCode::NotADirectory,
            FsError::IsADirectory { .. } => ErrorCode::IsADirectory,
            FsError::DirectoryNotEmpty { .. } => ErrorCode::DirectoryNotEmpty,
            FsError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            FsError::NoSpace { .. } => ErrorCode::NoSpace,
            FsError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            FsError::InvalidPath { .. } => ErrorCode::InvalidPath,
            FsError::NameTooLong { .. } => ErrorCode::NameTooLong,
            FsError::ChecksumMismatch { .. } => ErrorCode::ChecksumMismatch,
            FsError::Io { .. } => ErrorCode::Io,
            FsError::Timeout { .. } => ErrorCode::Timeout,
            FsError::Unavailable { .. } => ErrorCode::Unavailable,
            FsError::NotLeader { .. } => ErrorCode::NotLeader,
            FsError::FileIncomplete { .. } => ErrorCode::FileIncomplete,
            FsError::Protocol { .. } => ErrorCode::Protocol,
            FsError::Config { .. } => ErrorCode::Config,
            FsError::NoSuchXattr { .. } => ErrorCode::NoSuchXattr,
            FsError::NotASymlink { .. } => ErrorCode::NotASymlink,
            FsError::BlockNotFound { .. } => ErrorCode::BlockNotFound,
            FsError::Unauthenticated { .. } => ErrorCode::Unauthenticated,
            FsError::Busy { .. } => ErrorCode::Busy,
            FsError::CrossDevice { .. } => ErrorCode::CrossDevice,
            FsError::NotPermitted { .. } => ErrorCode::NotPermitted,
            FsError::ReadOnly { .. } => ErrorCode::ReadOnly,
            FsError::UnderStore { .. } => ErrorCode::UnderStore,
            FsError::ReplicasUnknown { .. } => ErrorCode::ReplicasUnknown,
            FsError::Internal { .. } => ErrorCode::Internal,
        }
    }

    /// Worth retrying on another attempt (or another replica).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            FsError::Timeout { .. }
                | FsError::Unavailable { .. }
                | FsError::NotLeader { .. }
                | FsError::Busy { .. }
                | FsError::ReplicasUnknown { .. }
        )
    }

    pub fn not_found(path: impl Into<String>) -> Self {
        FsError::NotFound { path: path.into() }
    }
    pub fn exists(path: impl Into<String>) -> Self {
        FsError::AlreadyExists { path: path.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        FsError::InvalidArgument {
            message: message.into(),
        }
    }
    pub fn io(message: impl Into<String>) -> Self {
        FsError::Io {
            message: message.into(),
        }
    }
    pub fn protocol(message: impl Into<String>) -> Self {
        FsError::Protocol {
            message: message.into(),
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        FsError::Internal {
            message: message.into(),
        }
    }
    pub fn no_space(message: impl Into<String>) -> Self {
        FsError::NoSpace {
            message: message.into(),
        }
    }
    pub fn config(message: impl Into<String>) -> Self {
        FsError::Config {
            message: message.into(),
        }
    }

    /// I/O error with context (what was being done, on which file).
    pub fn io_ctx(what: impl std::fmt::Display, e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == std::io::ErrorKind::StorageFull {
            return FsError::no_space(format!("{what}: {e}"));
        }
        FsError::io(format!("{what}: {e}"))
    }

    /// POSIX errno for this error (FUSE replies).
    pub fn errno(&self) -> i32 {
        match self.code() {
            ErrorCode::NotFound | ErrorCode::BlockNotFound => libc::ENOENT,
            ErrorCode::AlreadyExists => libc::EEXIST,
            ErrorCode::NotADirectory => libc::ENOTDIR,
            ErrorCode::IsADirectory => libc::EISDIR,
            ErrorCode::DirectoryNotEmpty => libc::ENOTEMPTY,
            ErrorCode::PermissionDenied => libc::EACCES,
            ErrorCode::NoSpace => libc::ENOSPC,
            ErrorCode::InvalidArgument | ErrorCode::InvalidPath => libc::EINVAL,
            ErrorCode::NameTooLong => libc::ENAMETOOLONG,
            ErrorCode::NoSuchXattr => libc::ENODATA,
            ErrorCode::NotASymlink => libc::EINVAL,
            ErrorCode::Timeout => libc::ETIMEDOUT,
            ErrorCode::Busy | ErrorCode::FileIncomplete => libc::EBUSY,
            ErrorCode::ReplicasUnknown => libc::EAGAIN,
            ErrorCode::CrossDevice => libc::EXDEV,
            ErrorCode::ReadOnly => libc::EROFS,
            ErrorCode::Unauthenticated | ErrorCode::NotPermitted => libc::EPERM,
            _ => libc::EIO,
        }
    }

    pub fn to_detail(&self) -> ErrorDetail {
        let mut d = ErrorDetail {
            code: self.code() as u32,
            message: self.to_string(),
            ..Default::default()
        };
        match self {
            FsError::NotFound { path }
            | FsError::AlreadyExists { path }
            | FsError::NotADirectory { path }
            | FsError::IsADirectory { path }
            | FsError::DirectoryNotEmpty { path }
            | FsError::PermissionDenied { path }
            | FsError::NameTooLong { path }
            | FsError::FileIncomplete { path }
            | FsError::NoSuchXattr { path }
            | FsError::NotASymlink { path }
            | FsError::CrossDevice { path }
            | FsError::NotPermitted { path }
            | FsError::ReadOnly { path } => d.path = path.clone(),
            FsError::InvalidPath { path, message } => {
                d.path = path.clone();
                d.message = message.clone();
            }
            FsError::ChecksumMismatch {
                block_id,
                worker,
                message,
            } => {
                d.block_id = *block_id;
                d.worker = worker.clone();
                d.message = message.clone();
            }
            FsError::BlockNotFound { block_id, worker } => {
                d.block_id = *block_id;
                d.worker = worker.clone();
            }
            FsError::NotLeader { leader } => d.leader = leader.clone(),
            FsError::ReplicasUnknown {
                path,
                block_id,
                message,
            } => {
                d.path = path.clone();
                d.block_id = *block_id;
                d.message = message.clone();
            }
            FsError::UnderStore {
                store,
                key,
                message,
            } => {
                d.store = store.clone();
                d.path = key.clone();
                d.message = message.clone();
            }
            FsError::NoSpace { message }
            | FsError::InvalidArgument { message }
            | FsError::Io { message }
            | FsError::Timeout { message }
            | FsError::Unavailable { message }
            | FsError::Protocol { message }
            | FsError::Config { message }
            | FsError::Unauthenticated { message }
            | FsError::Busy { message }
            | FsError::Internal { message } => d.message = message.clone(),
        }
        d
    }

    pub fn from_detail(d: ErrorDetail) -> FsError {
        let ErrorDetail {
            code,
            message,
            path,
            block_id,
            worker,
            leader,
            store,
        } = d;
        match ErrorCode::from_u32(code) {
            ErrorCode::NotFound => FsError::NotFound { path },
            ErrorCode::AlreadyExists => FsError::AlreadyExists { path },
            ErrorCode::NotADirectory => FsError::NotADirectory { path },
            ErrorCode::IsADirectory => FsError::IsADirectory { path },
            ErrorCode::DirectoryNotEmpty => FsError::DirectoryNotEmpty { path },
            ErrorCode::PermissionDenied => FsError::PermissionDenied { path },
            ErrorCode::NameTooLong => FsError::NameTooLong { path },
            ErrorCode::FileIncomplete => FsError::FileIncomplete { path },
            ErrorCode::NoSuchXattr => FsError::NoSuchXattr { path },
            ErrorCode::NotASymlink => FsError::NotASymlink { path },
            ErrorCode::CrossDevice => FsError::CrossDevice { path },
            ErrorCode::NotPermitted => FsError::NotPermitted { path },
            ErrorCode::ReadOnly => FsError::ReadOnly { path },
            ErrorCode::InvalidPath => FsError::InvalidPath { path, message },
            ErrorCode::ChecksumMismatch => FsError::ChecksumMismatch {
                block_id,
                worker,
                message,
            },
            ErrorCode::BlockNotFound => FsError::BlockNotFound { block_id, worker },
            ErrorCode::NotLeader => FsError::NotLeader { leader },
            ErrorCode::ReplicasUnknown => FsError::ReplicasUnknown {
                path,
                block_id,
                message,
            },
            ErrorCode::UnderStore => FsError::UnderStore {
                store,
                key: path,
                message,
            },
            ErrorCode::NoSpace => FsError::NoSpace { message },
            ErrorCode::InvalidArgument => FsError::InvalidArgument { message },
            ErrorCode::Io => FsError::Io { message },
            ErrorCode::Timeout => FsError::Timeout { message },
            ErrorCode::Unavailable => FsError::Unavailable { message },
            ErrorCode::Protocol => FsError::Protocol { message },
            ErrorCode::Config => FsError::Config { message },
            ErrorCode::Unauthenticated => FsError::Unauthenticated { message },
            ErrorCode::Busy => FsError::Busy { message },
            ErrorCode::Internal => FsError::Internal { message },
        }
    }
}

impl From<FsError> for tonic::Status {
    fn from(e: FsError) -> Self {
        let grpc = match e.code() {
            ErrorCode::NotFound | ErrorCode::BlockNotFound => tonic::Code::NotFound,
            ErrorCode::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorCode::PermissionDenied | ErrorCode::NotPermitted => tonic::Code::PermissionDenied,
            ErrorCode::Unauthenticated => tonic::Code::Unauthenticated,
            ErrorCode::NoSpace => tonic::Code::ResourceExhausted,
            ErrorCode::InvalidArgument | ErrorCode::InvalidPath | ErrorCode::NameTooLong => {
                tonic::Code::InvalidArgument
            }
            ErrorCode::Timeout => tonic::Code::DeadlineExceeded,
            ErrorCode::Unavailable | ErrorCode::NotLeader | ErrorCode::ReplicasUnknown => {
                tonic::Code::Unavailable
            }
            ErrorCode::Internal | ErrorCode::Io => tonic::Code::Internal,
            _ => tonic::Code::FailedPrecondition,
        };
        let detail = e.to_detail().encode_to_vec();
        // The message travels percent-decoded in a header; a literal '%' followed by hex
        // digits (a user's file name) would decode to garbage, so escape it.
        let message = e.to_string().replace('%', "%25");
        tonic::Status::with_details(grpc, message, detail.into())
    }
}

impl From<tonic::Status> for FsError {
    fn from(s: tonic::Status) -> Self {
        if !s.details().is_empty() {
            if let Ok(d) = ErrorDetail::decode(s.details()) {
                if d.code != 0 {
                    return FsError::from_detail(d);
                }
            }
        }
        match s.code() {
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown => {
                FsError::Unavailable {
                    message: s.message().to_string(),
                }
            }
            tonic::Code::DeadlineExceeded => FsError::Timeout {
                message: s.message().to_string(),
            },
            tonic::Code::Unauthenticated => FsError::Unauthenticated {
                message: s.message().to_string(),
            },
            _ => FsError::Internal {
                message: format!("{}: {}", s.code(), s.message()),
            },
        }
    }
}

impl From<tonic::transport::Error> for FsError {
    fn from(e: tonic::transport::Error) -> Self {
        FsError::Unavailable {
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trip_keeps_type_and_fields() {
        let e = FsError::ChecksumMismatch {
            block_id: 42,
            worker: "127.0.0.1:9".into(),
            message: "chunk 3".into(),
        };
        let back: FsError = tonic::Status::from(e).into();
        match back {
            FsError::ChecksumMismatch {
                block_id, worker, ..
            } => {
                assert_eq!(block_id, 42);
                assert_eq!(worker, "127.0.0.1:9");
            }
            other => panic!("wrong variant {other:?}"),
        }
        let back: FsError = tonic::Status::from(FsError::not_found("/a")).into();
        assert!(matches!(back, FsError::NotFound { ref path } if path == "/a"));
        assert_eq!(back.errno(), libc::ENOENT);
    }

    #[test]
    fn replicas_unknown_keeps_its_fields_and_is_retried() {
        let e = FsError::ReplicasUnknown {
            path: "/f".into(),
            block_id: 7,
            message: "0 of 1 workers reported".into(),
        };
        let back: FsError = tonic::Status::from(e).into();
        match &back {
            FsError::ReplicasUnknown {
                path,
                block_id,
                message,
            } => assert_eq!(
                (path.as_str(), *block_id, message.as_str()),
                ("/f", 7, "0 of 1 workers reported")
            ),
            other => panic!("wrong variant {other:?}"),
        }
        assert!(back.is_retryable());
        assert_eq!(back.errno(), libc::EAGAIN);
    }

    #[test]
    fn percent_in_a_path_survives_the_status() {
        let st = tonic::Status::from(FsError::not_found("/a%ff%zz"));
        assert!(!st.message().contains("%ff"));
        let back: FsError = st.into();
        assert!(matches!(back, FsError::NotFound { ref path } if path == "/a%ff%zz"));
    }

    #[test]
    fn plain_status_maps_to_unavailable() {
        let e: FsError = tonic::Status::unavailable("down").into();
        assert!(e.is_retryable());
    }
}
