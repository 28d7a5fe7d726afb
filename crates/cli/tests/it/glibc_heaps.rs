//! (filled in by the work on issues #36/#37)
