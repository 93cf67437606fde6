//! A small OpenAI-compatible upstream for tests: JSON and event-stream
//! completions that report their usage, with a latency the test controls.
