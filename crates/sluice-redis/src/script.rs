//! The decision script: (stub).
