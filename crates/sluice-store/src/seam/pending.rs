//! The future a store answers with: ready at once from a store in this
//! process (no allocation, no waker), or a boxed wait for one over the
//! network.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A store's answer: [`Pending::Ready`] from an in-process store, which
/// completes on its first poll, or [`Pending::Waiting`] for a remote one.
///
/// ```
/// use sluice_store::seam::{Pending, now_or_never};
/// let mut answer: Pending<'_, u32> = Pending::ready(7);
/// assert_eq!(answer.ready_mut(), Some(&mut 7));
/// assert_eq!(now_or_never(answer), Some(7));
/// ```
pub enum Pending<'a, T> {
    /// The answer, already known (`None` once a poll has taken it). A
    /// caller that knows the store answers at once may read it in place,
    /// without polling ([`Pending::ready_mut`]).
    Ready(Option<T>),
    /// An answer still on its way.
    Waiting(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> Pending<'a, T> {
    /// An answer known now.
    #[inline]
    pub fn ready(value: T) -> Self {
        Self::Ready(Some(value))
    }

    /// An answer to wait for.
    pub fn waiting(future: impl Future<Output = T> + Send + 'a) -> Self {
        Self::Waiting(Box::pin(future))
    }

    /// The answer, in place, when it is already known: no poll, and no
    /// move of a large answer.
    #[inline]
    pub fn ready_mut(&mut self) -> Option<&mut T> {
        match self {
            Self::Ready(value) => value.as_mut(),
            Self::Waiting(_) => None,
        }
    }
}

// The answer is never pinned (it is moved out whole, as `std::future::Ready`
// does), and the waiting future is pinned in its box.
impl<T> Unpin for Pending<'_, T> {}

impl<T> Future for Pending<'_, T> {
    type Output = T;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // Both variants are `Unpin`: the boxed future is pinned in its box.
        match self.get_mut() {
            Self::Ready(value) => match value.take() {
                Some(v) => Poll::Ready(v),
                // As `std::future::Ready`: a future is not polled again
                // once it has completed.
                None => panic!("Pending polled after completion"),
            },
            Self::Waiting(f) => f.as_mut().poll(cx),
        }
    }
}

impl<T> std::fmt::Debug for Pending<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Ready(_) => "Pending::Ready",
            Self::Waiting(_) => "Pending::Waiting",
        })
    }
}

/// Polls a future once: its output if it is ready at once (every decision
/// on a store in this process), else `None`. For synchronous callers such
/// as the simulator.
pub fn now_or_never<F: Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}
