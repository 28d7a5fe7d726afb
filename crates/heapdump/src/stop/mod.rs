//! The room of stopping: which thread may be stopped, and when, and the
//! stop itself.
//!
//! Owns: `guard`, each thread's own state as the tracker sees it (inside
//! the tracker or not, which table locks it holds, a stop or a signal
//! deferred until it leaves, table updates deferred by a signal handler),
//! and `stw`, stopping every other thread of the process in a signal
//! handler with its registers recorded, and resuming them.
//!
//! May touch: `sys` and `entry` (the record a deferred update carries).
//!
//! The one circle of the runtime's imports is here, and it is the
//! handshake itself: `stw` asks `guard` whether a thread it interrupts is
//! inside the tracker (`defer_stop`: then the thread parks as it leaves,
//! never while holding a table lock), and `guard` parks the thread with
//! `stw` when it leaves (`stw::park`).

pub(crate) mod guard;
pub(crate) mod stw;
