//! Operator commands. (Being written.)
