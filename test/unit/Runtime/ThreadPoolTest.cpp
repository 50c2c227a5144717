//===- ThreadPoolTest.cpp - every task exactly once, on every thread ------===//

#include "cq4p/runtime/ThreadPool.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace cq4p::runtime;

namespace {

/// Counts a task in, then waits (up to 10 s) until `count` tasks have
/// arrived: passing it proves that many threads held a task at once. Sets
/// `timedOut` rather than waiting forever.
void arriveAndWait(std::atomic<int> &arrived, int count,
                   std::atomic<bool> &timedOut) {
  arrived.fetch_add(1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (arrived.load() < count) {
    if (std::chrono::steady_clock::now() > deadline) {
      timedOut = true;
      return;
    }
    std::this_thread::yield();
  }
}

std::unique_ptr<ThreadPool> makePool(int threads) {
  std::unique_ptr<ThreadPool> pool;
  Status status = ThreadPool::create(threads, pool);
  EXPECT_TRUE(status) << status.message();
  return pool;
}

/// Runs `taskCount` tasks and checks that each ran exactly once.
void expectEachTaskOnce(ThreadPool &pool, int64_t taskCount) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(taskCount));
  for (auto &r : runs)
    r.store(0);
  pool.parallelFor(taskCount, [&](int64_t task) {
    ASSERT_GE(task, 0);
    ASSERT_LT(task, taskCount);
    runs[size_t(task)].fetch_add(1);
  });
  for (int64_t task = 0; task < taskCount; ++task)
    ASSERT_EQ(runs[size_t(task)].load(), 1)
        << "task " << task << " of " << taskCount << " on "
        << pool.threadCount() << " threads";
}

double processCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

TEST(ThreadPool, RefusesZeroAndNegativeThreadCounts) {
  std::unique_ptr<ThreadPool> pool;
  Status status = ThreadPool::create(0, pool);
  EXPECT_EQ(status.code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(status.message().find("thread count"), std::string::npos);
  EXPECT_NE(status.message().find("found 0"), std::string::npos)
      << status.message();
  EXPECT_EQ(pool, nullptr);
  EXPECT_EQ(ThreadPool::create(-3, pool).code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_EQ(ThreadPool::create(ThreadPool::kMaxThreads + 1, pool).code(),
            CQ4P_ERROR_ARGUMENT);

  pool = makePool(3);
  ASSERT_NE(pool, nullptr);
  status = pool->setThreadCount(0);
  EXPECT_EQ(status.code(), CQ4P_ERROR_ARGUMENT);
  // A refused count leaves the pool as it was.
  EXPECT_EQ(pool->threadCount(), 3);
  expectEachTaskOnce(*pool, 100);
}

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    auto pool = makePool(threads);
    ASSERT_NE(pool, nullptr);
    EXPECT_EQ(pool->threadCount(), threads);
    for (int64_t taskCount : {0, 1, 2, 3, 7, 8, 9, 64, 1000})
      expectEachTaskOnce(*pool, taskCount);
  }
}

TEST(ThreadPool, OneThreadRunsEverythingOnTheCaller) {
  auto pool = makePool(1);
  std::thread::id caller = std::this_thread::get_id();
  int runs = 0; // no atomics needed: all on this thread
  pool->parallelFor(50, [&](int64_t) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++runs;
  });
  EXPECT_EQ(runs, 50);
}

/// The CPUs this process may run on.
int usableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return int(std::max(1u, std::thread::hardware_concurrency()));
  return CPU_COUNT(&set);
}

// Each task waits until every working thread of the pool holds a task at
// once: only a pool whose workers and caller all work can finish (a
// deadline turns a hang into a failure).
TEST(ThreadPool, CallerAndEveryWorkerWorkAtOnce) {
  for (int requested : {2, 3, 4}) {
    auto pool = makePool(requested);
    int threads = pool->workingThreads();
    std::atomic<int> arrived{0};
    std::atomic<bool> timedOut{false};
    std::mutex idsMutex;
    std::set<std::thread::id> ids;
    pool->parallelFor(threads, [&](int64_t) {
      {
        std::lock_guard<std::mutex> lock(idsMutex);
        ids.insert(std::this_thread::get_id());
      }
      arriveAndWait(arrived, threads, timedOut);
    });
    EXPECT_FALSE(timedOut) << threads << " threads never all held a task";
    EXPECT_EQ(ids.size(), size_t(threads));
    EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u)
        << "the calling thread took no task";
  }
}

TEST(ThreadPool, EveryTaskOnceUnderContention) {
  auto pool = makePool(4);
  constexpr int kCallers = 4;
  constexpr int kRounds = 60;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        int64_t taskCount = 1 + (c * 37 + round * 13) % 97;
        std::vector<std::atomic<int>> runs(static_cast<size_t>(taskCount));
        for (auto &r : runs)
          r.store(0);
        pool->parallelFor(taskCount, [&](int64_t task) {
          runs[size_t(task)].fetch_add(1);
          if (task % 7 == 0)
            std::this_thread::yield(); // uneven task lengths
        });
        for (auto &r : runs)
          if (r.load() != 1)
            failures.fetch_add(1);
      }
    });
  for (std::thread &t : callers)
    t.join();
  EXPECT_EQ(failures.load(), 0);
}

// No more threads take tasks than the process has CPUs; the count asked for
// is still what threadCount() reports.
TEST(ThreadPool, WorkingThreadsAreAtMostTheCpus) {
  int cpus = usableCpus();
  for (int threads : {1, 2, 3, 4, 16}) {
    auto pool = makePool(threads);
    EXPECT_EQ(pool->threadCount(), threads);
    EXPECT_EQ(pool->workingThreads(), std::min(threads, cpus));
    pool->parallelFor(200, [&](int64_t, int thread) {
      ASSERT_GE(thread, 0);
      ASSERT_LT(thread, pool->workingThreads());
    });
  }
}

// Thread t starts with the t-th of equal contiguous ranges of the tasks:
// the first task of every range waits until all of them have started, so
// no thread can take another's range first, and task 3t runs on thread t.
TEST(ThreadPool, EachThreadStartsOnItsOwnRange) {
  for (int requested : {2, 3, 4}) {
    auto pool = makePool(requested);
    int threads = pool->workingThreads();
    if (threads < 2)
      GTEST_SKIP() << "one CPU: no worker takes tasks";
    for (int round = 0; round < 20; ++round) {
      std::atomic<int> arrived{0};
      std::atomic<bool> timedOut{false};
      std::vector<std::atomic<int>> ranOn(size_t(3 * threads));
      for (auto &r : ranOn)
        r.store(-1);
      pool->parallelFor(3 * threads, [&](int64_t task, int thread) {
        ranOn[size_t(task)].store(thread);
        if (task % 3 != 0)
          return;
        arriveAndWait(arrived, threads, timedOut);
      });
      ASSERT_FALSE(timedOut) << threads << " threads never all held a task";
      for (int t = 0; t < threads; ++t)
        EXPECT_EQ(ranOn[size_t(3 * t)].load(), t)
            << "task " << 3 * t << " of " << 3 * threads << ", round " << round;
    }
  }
}

TEST(ThreadPool, MoreThreadsThanCores) {
  auto pool = makePool(16);
  for (int round = 0; round < 20; ++round)
    expectEachTaskOnce(*pool, 33 + round);
}

// Back-to-back loops of a few tasks with more threads than CPUs: workers
// wake late and find the loop closed (or a later one open); each task still
// runs exactly once and no loop waits for a worker that did not join it.
TEST(ThreadPool, ShortLoopsWithMoreThreadsThanCpus) {
  int cpus = int(std::max(1u, std::thread::hardware_concurrency()));
  auto pool = makePool(std::min(4 * cpus, 64));
  for (int round = 0; round < 2000; ++round)
    expectEachTaskOnce(*pool, 2 + round % 4);
}

TEST(ThreadPool, NestedLoopRunsInline) {
  for (int threads : {1, 3}) {
    auto pool = makePool(threads);
    std::vector<std::atomic<int>> runs(8 * 5);
    for (auto &r : runs)
      r.store(0);
    pool->parallelFor(8, [&](int64_t outer) {
      pool->parallelFor(5, [&](int64_t inner) {
        runs[size_t(outer * 5 + inner)].fetch_add(1);
      });
    });
    for (auto &r : runs)
      EXPECT_EQ(r.load(), 1);
  }
}

TEST(ThreadPool, ReusableAcrossThreadCounts) {
  auto pool = makePool(1);
  for (int threads : {4, 2, 1, 3, 3, 8}) {
    Status status = pool->setThreadCount(threads);
    ASSERT_TRUE(status) << status.message();
    EXPECT_EQ(pool->threadCount(), threads);
    for (int round = 0; round < 10; ++round)
      expectEachTaskOnce(*pool, 1 + round * 11);
  }
}

TEST(ThreadPool, ResizeWaitsForTheRunningLoop) {
  auto pool = makePool(2);
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread runner([&] {
    for (int round = 0; round < 40; ++round) {
      std::vector<std::atomic<int>> runs(64);
      for (auto &r : runs)
        r.store(0);
      pool->parallelFor(64, [&](int64_t task) {
        runs[size_t(task)].fetch_add(1);
        std::this_thread::yield();
      });
      for (auto &r : runs)
        if (r.load() != 1)
          failures.fetch_add(1);
    }
    done = true;
  });
  for (int i = 0; !done; ++i)
    ASSERT_TRUE(pool->setThreadCount(1 + i % 4));
  runner.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, CreateAndDestroyRepeatedly) {
  for (int i = 0; i < 30; ++i) {
    auto pool = makePool(1 + i % 5);
    if (i % 2)
      expectEachTaskOnce(*pool, 17);
  }
}

TEST(ThreadPool, IdleWorkersSleep) {
  auto pool = makePool(8);
  expectEachTaskOnce(*pool, 64);
  // Let the post-loop spin run out, then measure an idle stretch.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double before = processCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  double used = processCpuSeconds() - before;
  // Seven spinning workers would burn every core for the whole 400 ms.
  EXPECT_LT(used, 0.1) << "idle pool used " << used << " s of CPU in 0.4 s";
  expectEachTaskOnce(*pool, 64);
}


// As above, every thread holds one task at once; each reports its index:
// the caller 0, the workers 1..nt-1, one index per thread.
TEST(ThreadPool, TasksAreToldWhichThreadRunsThem) {
  for (int requested : {1, 2, 3, 4}) {
    auto pool = makePool(requested);
    int threads = pool->workingThreads();
    std::atomic<int> arrived{0};
    std::atomic<bool> timedOut{false};
    std::mutex seenMutex;
    std::vector<std::thread::id> idOfIndex(static_cast<size_t>(threads));
    std::vector<int> tasksOfIndex(size_t(threads), 0);
    std::atomic<int> outOfRange{0};
    pool->parallelFor(threads, [&](int64_t, int thread) {
      if (thread < 0 || thread >= threads) {
        outOfRange.fetch_add(1);
        return;
      }
      {
        std::lock_guard<std::mutex> lock(seenMutex);
        idOfIndex[size_t(thread)] = std::this_thread::get_id();
        ++tasksOfIndex[size_t(thread)];
      }
      arriveAndWait(arrived, threads, timedOut);
    });
    ASSERT_EQ(outOfRange.load(), 0);
    ASSERT_FALSE(timedOut) << threads << " threads never all held a task";
    std::set<std::thread::id> distinct(idOfIndex.begin(), idOfIndex.end());
    EXPECT_EQ(distinct.size(), size_t(threads)) << "two indices on one thread";
    for (int index = 0; index < threads; ++index)
      EXPECT_EQ(tasksOfIndex[size_t(index)], 1) << "index " << index;
    EXPECT_EQ(idOfIndex[0], std::this_thread::get_id())
        << "index 0 is not the calling thread";
  }
}

// Over many short tasks, a thread keeps its index and an index its thread.
TEST(ThreadPool, ThreadIndicesAreStableAcrossTasksAndLoops) {
  auto pool = makePool(4);
  std::mutex mutex;
  std::vector<std::set<std::thread::id>> idsOfIndex(4);
  std::atomic<int> outOfRange{0};
  for (int round = 0; round < 50; ++round)
    pool->parallelFor(64, [&](int64_t task, int thread) {
      if (thread < 0 || thread >= 4) {
        outOfRange.fetch_add(1);
        return;
      }
      if (task % 5 == 0)
        std::this_thread::yield();
      std::lock_guard<std::mutex> lock(mutex);
      idsOfIndex[size_t(thread)].insert(std::this_thread::get_id());
    });
  EXPECT_EQ(outOfRange.load(), 0);
  std::set<std::thread::id> all;
  for (int index = 0; index < 4; ++index) {
    EXPECT_LE(idsOfIndex[size_t(index)].size(), 1u) << "index " << index;
    all.insert(idsOfIndex[size_t(index)].begin(), idsOfIndex[size_t(index)].end());
  }
  size_t used = 0;
  for (const auto &ids : idsOfIndex)
    used += ids.size();
  EXPECT_EQ(all.size(), used) << "one thread under two indices";
  EXPECT_EQ(idsOfIndex[0].count(std::this_thread::get_id()), 1u);
}

// A one-task loop runs on the caller as thread 0; a nested loop's tasks run
// inline with the index of the task that issued them; the untemplated
// run() without an index still works.
TEST(ThreadPool, OneTaskAndNestedLoopsKeepTheCallersIndex) {
  for (int threads : {1, 3}) {
    auto pool = makePool(threads);
    int single = -1;
    std::thread::id caller = std::this_thread::get_id(), ranOn;
    pool->parallelFor(1, [&](int64_t, int thread) {
      single = thread;
      ranOn = std::this_thread::get_id();
    });
    EXPECT_EQ(single, 0);
    EXPECT_EQ(ranOn, caller);

    std::vector<std::atomic<int>> outerThread(6), mismatches(6);
    for (size_t i = 0; i < 6; ++i) {
      outerThread[i].store(-1);
      mismatches[i].store(0);
    }
    pool->parallelFor(6, [&](int64_t outer, int thread) {
      outerThread[size_t(outer)].store(thread);
      std::thread::id self = std::this_thread::get_id();
      pool->parallelFor(4, [&](int64_t, int inner) {
        if (inner != thread || std::this_thread::get_id() != self)
          mismatches[size_t(outer)].fetch_add(1);
      });
    });
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_GE(outerThread[i].load(), 0);
      EXPECT_LT(outerThread[i].load(), threads);
      EXPECT_EQ(mismatches[i].load(), 0) << "outer task " << i;
    }

    std::vector<std::atomic<int>> runs(20);
    for (auto &r : runs)
      r.store(0);
    pool->run(
        20,
        ThreadPool::TaskFn([](void *context, int64_t task) {
          (*static_cast<std::vector<std::atomic<int>> *>(context))[size_t(task)]
              .fetch_add(1);
        }),
        &runs);
    for (auto &r : runs)
      EXPECT_EQ(r.load(), 1);
  }
}

} // namespace
