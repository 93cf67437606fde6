//! Adaptive overload protection: a concurrency limit on an upstream that
//! follows its latency, and a gate that sheds the lowest priority class
//! first when the limit is reached. Plain, synchronous and I/O-free, like
//! the rate algorithms: the caller passes the time in.
