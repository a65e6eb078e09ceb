//! What every reporter of events is: progress.rs and transfers.rs choose
//! them, json_reporter.rs and human_reporter.rs implement them.

/// One way of showing events of type `E`. Called from the threads the
/// events happen on.
pub trait Reporter<E: ?Sized>: Send + Sync {
    fn report(&self, event: &E);
}
