#include "camera_control.h"

#include <condition_variable>

namespace prism {

struct ControlAnswer {
  std::mutex mutex;
  std::condition_variable ready;
  std::optional<CameraControl::Reply> reply;
};

namespace {

CameraControl::Reply unavailable(const std::string& why) {
  CameraControl::Reply r;
  r.status = 503;
  r.message = why;
  return r;
}

}  // namespace

std::vector<CameraControl::Camera> CameraControl::cameras() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cameras_;
}

bool CameraControl::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ && !closed_;
}

CameraControl::Reply CameraControl::submit(Request request, std::chrono::milliseconds wait) {
  auto answer = std::make_shared<ControlAnswer>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return unavailable("the run is ending: cameras can no longer be added or removed");
    if (!running_) return unavailable("the pipeline is not playing yet; try again");
    pending_.push_back({std::move(request), answer});
  }
  std::unique_lock<std::mutex> lock(answer->mutex);
  if (!answer->ready.wait_for(lock, wait, [&] { return answer->reply.has_value(); }))
    return unavailable("the pipeline did not answer within " + std::to_string(wait.count()) +
                       " ms (the request may still be done)");
  return *answer->reply;
}

void CameraControl::answer(const Pending& pending, Reply reply) {
  std::lock_guard<std::mutex> lock(pending.answer->mutex);
  pending.answer->reply = std::move(reply);
  pending.answer->ready.notify_all();
}

std::vector<CameraControl::Pending> CameraControl::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Pending> out(pending_.begin(), pending_.end());
  pending_.clear();
  return out;
}

void CameraControl::publish(std::vector<Camera> cameras, bool running) {
  std::lock_guard<std::mutex> lock(mutex_);
  cameras_ = std::move(cameras);
  running_ = running;
}

void CameraControl::close() {
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    running_ = false;
    left.swap(pending_);
  }
  for (const Pending& p : left) answer(p, unavailable("the run is ending: cameras can no longer be added or removed"));
}

}  // namespace prism
