//! Job files in JSON. (Being written.)
