//! The work wing: queue consumers and the cron.
pub mod audit;
pub mod calls;
pub mod cron;
pub mod deliver;
pub mod dispatch;
pub mod erase;
pub mod jobs;
pub mod media;
pub mod outcome;
pub mod process;
pub mod reconcile;
pub mod recover;
pub mod retention;
pub mod sweep;
