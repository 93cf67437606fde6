//! The cost a response reports about itself: the `usage` of an
//! OpenAI-style JSON body or event stream, found by reading a bounded part
//! of the body as it streams past.
