//===- ThreadPool.cpp - workers, ranges of tasks and a generation number --===//
//
// One job at a time. The caller publishes a job (function, one range of
// tasks per taking part thread) under the mutex and bumps the generation;
// workers that see a new generation copy the job under the mutex and, if
// they may take part, join it (an atomic count tagged with the job's
// generation, refused once the job is closed), take tasks from their own
// range and then from the others', then check in. The caller takes tasks
// too; when none is left it closes the job and waits only for the workers
// that joined, so no worker touches a job after its parallelFor has
// returned, and a worker that wakes late (or was descheduled before
// joining) costs nothing. A worker may sleep through generations, which is
// harmless since it reads the job only under the mutex and joins only its
// own generation.
//
// Threads come from pthread_create rather than std::thread so that a
// failure to start one is a Status, not an exception in a runtime built
// without them.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/ThreadPool.h"

#include <algorithm>
#include <cstring>
#include <sched.h>
#include <string>
#include <thread>

namespace cq4p::runtime {
namespace {

// Short enough that an idle pool stops burning CPU within tens of
// microseconds, long enough to catch the next loop of a decode step.
constexpr int kSpinIterations = 2000;
/// Of those, the first ones only pause (a loop that follows at once is
/// caught without a system call); the rest yield the CPU.
constexpr int kBusySpins = 64;

/// The CPUs this process may run on (its affinity mask where there is one),
/// 0 if unknown.
int usableCpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return CPU_COUNT(&set);
#endif
  return int(std::thread::hardware_concurrency());
}

inline void cpuRelax();

/// One step of an idle worker's wait for the next loop: a few pause
/// instructions, then yields, so that a spinning worker gives its core to
/// any thread that can run there (another pool's, the caller's) instead of
/// taking the core for the whole spin.
inline void idle(int spin) {
  if (spin < kBusySpins)
    cpuRelax();
  else
    std::this_thread::yield();
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The pool whose tasks the current thread is running, if any, and the
// thread index those tasks see.
thread_local const ThreadPool *runningPool = nullptr;
thread_local int runningThread = 0;

struct RunningPoolScope {
  const ThreadPool *savedPool;
  int savedThread;
  RunningPoolScope(const ThreadPool *pool, int thread)
      : savedPool(runningPool), savedThread(runningThread) {
    runningPool = pool;
    runningThread = thread;
  }
  ~RunningPoolScope() {
    runningPool = savedPool;
    runningThread = savedThread;
  }
};

// Adapts run()'s TaskFn to the ThreadTaskFn the pool runs.
struct TaskWithoutThread {
  ThreadPool::TaskFn fn;
  void *context;
  static void call(void *adapter, int64_t task, int) {
    auto *self = static_cast<TaskWithoutThread *>(adapter);
    self->fn(self->context, task);
  }
};

} // namespace

Status ThreadPool::create(int threads, std::unique_ptr<ThreadPool> &out,
                          size_t workerStackBytes) {
  out.reset();
  std::unique_ptr<ThreadPool> pool(new ThreadPool());
  pool->workerStackBytes_ = std::max(workerStackBytes, kWorkerStackBytes);
  if (Status status = pool->setThreadCount(threads); !status)
    return status;
  out = std::move(pool);
  return Status::ok();
}

ThreadPool::~ThreadPool() { stopWorkers(); }

Status ThreadPool::setThreadCount(int threads) {
  if (threads < 1 || threads > kMaxThreads)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "thread count: expected 1.." + std::to_string(kMaxThreads) +
                      " (the calling thread plus workers), found " +
                      std::to_string(threads));
  std::lock_guard<std::mutex> submit(submitMutex_);
  stopWorkers();
  int cpus = usableCpus();
  int working = cpus > 0 ? std::min(threads, cpus) : threads;
  ranges_.reset(new Range[size_t(working)]);
  // Kernels keep row tiles on their stack (the orthogonal tensors' fp32 rows
  // of an AVX-512 tile at K = 8192 take 512 KiB): a worker gets
  // kWorkerStackBytes whatever the platform's default (512 KiB on Apple's
  // systems, about 1 MiB on Android).
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, workerStackBytes_);
  for (int i = 0; i + 1 < working; ++i) {
    auto slot = std::make_unique<WorkerSlot>();
    slot->pool = this;
    slot->index = i;
    // Read here, not by the new thread: a job published before that thread
    // first runs must still count as new to it.
    slot->startGeneration = generation_.load(std::memory_order_relaxed);
    int error = pthread_create(&slot->thread, &attributes,
                               &ThreadPool::workerMain, slot.get());
    if (error != 0) {
      pthread_attr_destroy(&attributes);
      stopWorkers();
      return Status(CQ4P_ERROR_IO,
                    "thread pool: cannot start worker " + std::to_string(i + 1) +
                        " of " + std::to_string(working - 1) + ": " +
                        std::strerror(error) +
                        "; running on the calling thread alone");
    }
    workers_.push_back(std::move(slot));
  }
  pthread_attr_destroy(&attributes);
  threadCount_.store(threads, std::memory_order_relaxed);
  workingThreads_.store(working, std::memory_order_relaxed);
  return Status::ok();
}

void ThreadPool::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wakeWorkers_.notify_all();
  for (auto &slot : workers_)
    pthread_join(slot->thread, nullptr);
  workers_.clear();
  threadCount_.store(1, std::memory_order_relaxed);
  workingThreads_.store(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
}

void *ThreadPool::workerMain(void *slot) {
  auto *worker = static_cast<WorkerSlot *>(slot);
  worker->pool->workerLoop(worker->index, worker->startGeneration);
  return nullptr;
}

void ThreadPool::workerLoop(int index, uint64_t seen) {
  for (;;) {
    for (int spin = 0; spin < kSpinIterations &&
                       generation_.load(std::memory_order_acquire) == seen;
         ++spin)
      idle(spin);
    ThreadTaskFn fn;
    void *context;
    int ranges;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wakeWorkers_.wait(lock, [&] {
        return stopping_ || generation_.load(std::memory_order_relaxed) != seen;
      });
      if (stopping_)
        return;
      seen = generation_.load(std::memory_order_relaxed);
      if (index >= participants_)
        continue;
      fn = fn_;
      context = context_;
      ranges = participants_ + 1;
    }
    uint64_t job = (seen & 0xffffffffu) << 32;
    uint64_t state = joined_.load(std::memory_order_acquire);
    bool joining = false;
    while ((state & ~kJoinedMask & ~kClosed) == job && !(state & kClosed)) {
      if (joined_.compare_exchange_weak(state, state + 1,
                                        std::memory_order_acq_rel)) {
        joining = true;
        break;
      }
    }
    if (!joining)
      continue;
    drain(fn, context, ranges, index + 1);
    int done = finished_.fetch_add(1, std::memory_order_acq_rel) + 1;
    state = joined_.load(std::memory_order_acquire);
    if ((state & kClosed) && uint64_t(done) == (state & kJoinedMask)) {
      // Under the mutex: the caller tests the count and sleeps atomically
      // with respect to it, so this wake-up cannot fall between the two.
      std::lock_guard<std::mutex> lock(mutex_);
      jobDone_.notify_one();
    }
  }
}

void ThreadPool::drain(ThreadTaskFn fn, void *context, int ranges,
                       int thread) {
  RunningPoolScope scope(this, thread);
  // The thread's own range first, then the others' in turn.
  for (int i = 0; i < ranges; ++i) {
    Range &range = ranges_[size_t((thread + i) % ranges)];
    while (range.next.load(std::memory_order_relaxed) < range.end) {
      int64_t task = range.next.fetch_add(1, std::memory_order_relaxed);
      if (task >= range.end)
        break;
      fn(context, task, thread);
    }
  }
}

void ThreadPool::run(int64_t taskCount, TaskFn fn, void *context) {
  TaskWithoutThread adapter{fn, context};
  run(taskCount, &TaskWithoutThread::call, &adapter);
}

void ThreadPool::run(int64_t taskCount, ThreadTaskFn fn, void *context) {
  if (taskCount <= 0)
    return;
  if (runningPool == this) {
    for (int64_t task = 0; task < taskCount; ++task)
      fn(context, task, runningThread);
    return;
  }
  std::lock_guard<std::mutex> submit(submitMutex_);
  if (taskCount == 1 || workers_.empty()) {
    // Under the lock, as thread 0, and marked as running: a nested loop
    // runs inline rather than waiting for this lock, and no other caller
    // runs tasks as thread 0 meanwhile.
    RunningPoolScope scope(this, 0);
    for (int64_t task = 0; task < taskCount; ++task)
      fn(context, task, 0);
    return;
  }
  int participants =
      int(std::min<int64_t>(int64_t(workers_.size()), taskCount - 1));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn;
    context_ = context;
    participants_ = participants;
    // Sizes differing by at most one, without a product that could overflow.
    int64_t ranges = participants + 1;
    int64_t base = taskCount / ranges, extra = taskCount % ranges;
    for (int64_t t = 0; t < ranges; ++t) {
      Range &range = ranges_[size_t(t)];
      range.next.store(t * base + std::min(t, extra), std::memory_order_relaxed);
      range.end = (t + 1) * base + std::min(t + 1, extra);
    }
    finished_.store(0, std::memory_order_relaxed);
    uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    joined_.store((generation & 0xffffffffu) << 32, std::memory_order_relaxed);
    generation_.store(generation, std::memory_order_release);
  }
  wakeWorkers_.notify_all();
  drain(fn, context, participants + 1, 0);
  // No task is left: close the job to latecomers, then wait for those in it.
  int joined = int(joined_.fetch_or(kClosed, std::memory_order_acq_rel) &
                   kJoinedMask);
  for (int spin = 0; spin < kSpinIterations &&
                     finished_.load(std::memory_order_acquire) != joined;
       ++spin)
    cpuRelax();
  std::unique_lock<std::mutex> lock(mutex_);
  jobDone_.wait(lock, [&] {
    return finished_.load(std::memory_order_acquire) == joined;
  });
}

} // namespace cq4p::runtime
