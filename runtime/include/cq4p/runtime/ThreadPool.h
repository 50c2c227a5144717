//===- ThreadPool.h - the runtime's threads ---------------------*- C++ -*-===//
//
// A pool of `threadCount()` threads in total: threadCount() - 1 workers plus
// the thread that calls parallelFor, which works too (a decode step is a
// chain of short parallel loops; handing the caller's core to a worker and
// sleeping would waste it).
//
// Tasks are split into one contiguous range per working thread, the same
// ranges for the same task count every time: a layer's loop gives each
// thread the same weights call after call, which then stay in that core's
// cache (with tasks dealt from one shared counter they wandered between
// cores, and a GEMV that fits in the caches ran no faster on 2 threads than
// on 1). A thread that finishes its range takes tasks from the others'
// (from a worker that has not started, all of them), each from an atomic
// counter per range, so every task runs exactly once and a slow thread
// does fewer.
//
// At most workingThreads() of the threads work at once: no more than the
// process may run on CPUs at once. The others never take a task (with more
// threads than CPUs, a worker preempted in the middle of its task would
// make the whole loop wait for the scheduler). Idle working workers spin
// briefly (back-to-back loops are the common case), then sleep on a
// condition variable: an idle pool costs no CPU. A loop never waits for a
// worker that had not started on it by the time every task was taken: it
// waits only for the workers that joined, so a descheduled worker cannot
// make a call slower than running it alone.
//
// parallelFor calls are serialised: one loop runs at a time per pool. A
// parallelFor issued from inside one of this pool's tasks runs its tasks
// inline on the calling thread (it would otherwise wait for itself).
//
// Every task is told which of the pool's threads runs it: 0 for the thread
// that called parallelFor, 1..workingThreads()-1 for the workers (a nested
// loop's tasks carry the index of the task that issued it). Loops being
// serialised, at most one thread at a time runs this pool's tasks under a
// given index, so a caller can reserve a resource for some indices: the
// LinearLayer runs SME2 kernels on the first few only (Linear.h), since
// the cores of an SME2 cluster share one SME unit.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_THREADPOOL_H
#define CQ4P_RUNTIME_THREADPOOL_H

#include "cq4p/runtime/Status.h"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <type_traits>
#include <vector>

namespace cq4p::runtime {

class ThreadPool {
public:
  /// More threads than any phone or workstation has cores: a larger
  /// request is a caller's bug.
  static constexpr int kMaxThreads = 1024;
  /// Each worker's least stack. Kernels keep row tiles on the stack (a
  /// Model asks for more when its steps need it: Model::stackBytes()); the
  /// thread that calls parallelFor runs tasks too, and a Model checks that
  /// it has what a step needs.
  static constexpr size_t kWorkerStackBytes = size_t(8) << 20;

  /// A pool of `threads` threads in total (>= 1; 1 runs everything on the
  /// calling thread).
  /// `workerStackBytes`: each worker's stack, at least kWorkerStackBytes
  /// (a Model asks for more when its steps need it).
  static Status create(int threads, std::unique_ptr<ThreadPool> &out,
                       size_t workerStackBytes = kWorkerStackBytes);

  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;
  /// Stops and joins every worker.
  ~ThreadPool();

  int threadCount() const {
    return threadCount_.load(std::memory_order_relaxed);
  }

  /// How many of the threads take tasks: threadCount(), or the number of
  /// CPUs this process may run on if that is smaller. Callers size their
  /// tasks by it.
  int workingThreads() const {
    return workingThreads_.load(std::memory_order_relaxed);
  }

  /// Stops the workers and starts `threads` - 1 new ones, after any
  /// parallelFor running on another thread has finished (never call it from
  /// one of this pool's tasks: it would wait for itself). If a worker cannot
  /// be started, the pool keeps running on the calling thread alone and says
  /// why.
  Status setThreadCount(int threads);

  /// Runs fn(task), or fn(task, thread) when fn takes the thread's index
  /// too, for every task in [0, taskCount), spread over the pool's threads;
  /// returns when all have finished (their writes are visible to the caller
  /// then).
  template <typename Fn> void parallelFor(int64_t taskCount, Fn &&fn) {
    using Callable = std::remove_reference_t<Fn>;
    void *context = const_cast<void *>(static_cast<const void *>(&fn));
    if constexpr (std::is_invocable_v<Callable &, int64_t, int>)
      run(taskCount,
          ThreadTaskFn([](void *context, int64_t task, int thread) {
            (*static_cast<Callable *>(context))(task, thread);
          }),
          context);
    else
      run(taskCount,
          ThreadTaskFn([](void *context, int64_t task, int) {
            (*static_cast<Callable *>(context))(task);
          }),
          context);
  }

  using TaskFn = void (*)(void *context, int64_t task);
  /// parallelFor without the template: fn(context, task).
  void run(int64_t taskCount, TaskFn fn, void *context);

  using ThreadTaskFn = void (*)(void *context, int64_t task, int thread);
  /// parallelFor without the template: fn(context, task, thread).
  void run(int64_t taskCount, ThreadTaskFn fn, void *context);

private:
  size_t workerStackBytes_ = kWorkerStackBytes;
  struct WorkerSlot {
    ThreadPool *pool;
    int index; // among the workers; the thread index its tasks see is index + 1
    uint64_t startGeneration; // the generation before the worker's first job
    pthread_t thread;
  };

  ThreadPool() = default;
  static void *workerMain(void *slot);
  void workerLoop(int index, uint64_t seen);
  void drain(ThreadTaskFn fn, void *context, int ranges, int thread);
  void stopWorkers();

  std::mutex submitMutex_; // one loop (or resize) at a time
  std::vector<std::unique_ptr<WorkerSlot>> workers_; // under submitMutex_
  std::atomic<int> threadCount_{1};
  std::atomic<int> workingThreads_{1};
  std::mutex mutex_;       // guards the job fields below and stopping_
  std::condition_variable wakeWorkers_;
  std::condition_variable jobDone_;
  std::atomic<uint64_t> generation_{0}; // written under mutex_
  bool stopping_ = false;

  ThreadTaskFn fn_ = nullptr;
  void *context_ = nullptr;
  int participants_ = 0; // worker slots 0..participants_-1 join the current job
  /// The current job's tasks [next, end) of thread t's range, t = 0 for the
  /// caller, t = slot + 1 for a worker; participants_ + 1 of them in use.
  struct alignas(64) Range {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Range[]> ranges_; // workingThreads() of them
  std::atomic<int> finished_{0}; // joined workers done with the current job
  /// The current job's low 32 generation bits, kClosed once the caller has
  /// taken its last task, and the number of workers that joined it.
  std::atomic<uint64_t> joined_{0};
  static constexpr uint64_t kClosed = uint64_t(1) << 31;
  static constexpr uint64_t kJoinedMask = kClosed - 1;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_THREADPOOL_H
