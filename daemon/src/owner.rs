//! One thread owns one resource (a SQLite connection, a git repository); everyone else
//! sends it closures. This keeps blocking work off the async runtime and gives each
//! resource exactly one owner, with no lock to hold across an `.await`.

use std::future::Future;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;
use tokio::sync::oneshot;

type Job<T> = Box<dyn FnOnce(&mut T) + Send>;

pub struct Owner<T> {
    jobs: mpsc::Sender<Job<T>>,
    name: &'static str,
}

impl<T> Clone for Owner<T> {
    fn clone(&self) -> Self {
        Owner {
            jobs: self.jobs.clone(),
            name: self.name,
        }
    }
}

/// The next job; `None` once every sender is gone. While `armed`, a quiet spell of
/// `idle.after` runs `idle.release` and disarms.
fn next_job<T>(
    queue: &mpsc::Receiver<Job<T>>,
    idle: Option<&Idle<T>>,
    armed: &mut bool,
    resource: &mut T,
) -> Option<Job<T>> {
    loop {
        match idle.filter(|_| *armed) {
            None => return queue.recv().ok(),
            Some(idle) => match queue.recv_timeout(idle.after) {
                Ok(job) => return Some(job),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    (idle.release)(resource);
                    *armed = false;
                }
            },
        }
    }
}

/// The owning thread is gone (it panicked, or the process is ending).
#[derive(Debug, thiserror::Error)]
#[error("the {0} thread is gone")]
pub struct OwnerGone(pub &'static str);

/// What an owning thread does when no job has come for a while: `release` runs once
/// per quiet spell, `after` the last job (a timer armed as the thread goes idle, not a
/// poll: a thread that released waits for the next job without a timeout).
pub struct Idle<T> {
    pub after: Duration,
    pub release: fn(&mut T),
}

impl<T: 'static> Owner<T> {
    /// Starts the owning thread; `init` builds the resource on that thread. A thread
    /// that cannot be started, or that dies in `init`, is an error, never a panic.
    pub fn spawn<E: From<OwnerGone> + Send + 'static>(
        name: &'static str,
        init: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<Owner<T>, E> {
        Owner::spawn_with_idle(name, init, None)
    }

    /// As [`Owner::spawn`], and the thread runs `idle` when it has been quiet.
    pub fn spawn_with_idle<E: From<OwnerGone> + Send + 'static>(
        name: &'static str,
        init: impl FnOnce() -> Result<T, E> + Send + 'static,
        idle: Option<Idle<T>>,
    ) -> Result<Owner<T>, E> {
        let (jobs, queue) = mpsc::channel::<Job<T>>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), E>>();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut resource = match init() {
                    Ok(resource) => {
                        let _ = ready_tx.send(Ok(()));
                        resource
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut armed = false;
                while let Some(job) = next_job(&queue, idle.as_ref(), &mut armed, &mut resource) {
                    job(&mut resource);
                    armed = idle.is_some();
                }
            })
            .map_err(|_| OwnerGone(name))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Owner { jobs, name }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(OwnerGone(name).into()),
        }
    }

    /// Runs `f` on the owning thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut T) -> R + Send + 'static,
    ) -> Result<R, OwnerGone> {
        self.submit(f).await
    }

    /// Queues `f` on the owning thread at once, before the returned future is first
    /// polled, so that the thread can start on it while the caller does other work;
    /// the future gives its result.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut T) -> R + Send + 'static,
    ) -> impl Future<Output = Result<R, OwnerGone>> + Send + 'static {
        let name = self.name;
        let (tx, rx) = oneshot::channel();
        let queued = self
            .jobs
            .send(Box::new(move |resource| {
                let _ = tx.send(f(resource));
            }))
            .map_err(|_| OwnerGone(name));
        async move {
            queued?;
            rx.await.map_err(|_| OwnerGone(name))
        }
    }
}
