/* CallbackPool (callbacks.hpp): a small growing pool of threads that complete
 * Futures, so that a callback blocking on another Future cannot stall the group. */
#include "c10d/callbacks.hpp"

#include <ATen/ATen.h>

namespace kolo_c10d {

CallbackPool::~CallbackPool() { stop(); }

void CallbackPool::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  /* every queued task needs an idle thread of its own: a running callback may block */
  if (tasks_.size() > idle_ && threads_.size() < kMaxThreads)
    threads_.emplace_back([this] { loop(); });
  cv_.notify_one();
}

void CallbackPool::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto &thread : threads) thread.join();
}

void CallbackPool::loop() {
  at::NoGradGuard no_grad;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    idle_++;
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    idle_--;
    if (tasks_.empty()) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace kolo_c10d
