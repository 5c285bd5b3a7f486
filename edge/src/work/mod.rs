//! The work wing: queue consumers and the cron.
pub mod calls;
pub mod deliver;
pub mod dispatch;
pub mod jobs;
pub mod media;
pub mod process;
pub mod reconcile;
pub mod sweep;

/// How many deliveries of one queue batch are attempted at once. A Worker invocation keeps at
/// most six connections open; a fetch beyond them waits inside the runtime while its timeout
/// already runs, so a batch of slow endpoints could time out attempts that were never sent. Six
/// attempts, each with one subrequest open at a time, stay within the limit.
pub const MESSAGES_IN_FLIGHT: usize = 6;
