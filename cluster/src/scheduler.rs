//! The scheduler: turns an evaluation into a plan. (Being written.)
