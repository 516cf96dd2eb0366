//! Everything this crate uses of the lead's code, in one place (a path that changes in
//! `antler-lead` is mended here): the lead's control client that stops one actor of a
//! cluster in chaos mode (`antler chaos stop`'s request), the runs database's file in a
//! runtime directory, and the variable naming a lead's PostgreSQL store.

pub(crate) use antler_lead::commands::chaos::stop_actor;
pub(crate) use antler_lead::commands::run::CHECKPOINT_FILE;
pub(crate) use antler_lead::runs::store::STORE_DSN_ENV;
