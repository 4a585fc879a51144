/* CallbackPool: the threads that complete KoloWork Futures, i.e. run the callbacks
 * chained on them (DDP's bucket callbacks, comm hooks' then()). They are not run on the
 * completion thread: a hook may block in a callback on another collective's Future
 * (PowerSGD's waits for its P all-reduce inside a then()), which only the completion
 * thread can finish. A task that finds no idle thread starts one (up to kMaxThreads),
 * so a blocked callback never holds up the completion of another Future. */
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kolo_c10d {

class CallbackPool {
 public:
  static constexpr size_t kMaxThreads = 16;
  CallbackPool() = default;
  CallbackPool(const CallbackPool &) = delete;
  CallbackPool &operator=(const CallbackPool &) = delete;
  ~CallbackPool();

  void post(std::function<void()> task);
  /* Runs every task posted so far, then joins the threads. */
  void stop();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace kolo_c10d
