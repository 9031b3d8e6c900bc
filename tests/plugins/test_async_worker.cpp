// GstPrismAsyncWorker (gst-libs/gst/prism/gstprismasyncworker.h), the async mode's worker of
// GstPrismCudaFilter, without an element: its states and transitions, one job at a time, frames
// skipped while busy, the failure latched, drain, stop while busy, stop without start, double stop.
// The elements' async mode (textureid, bowclassify, emdtracker) is tested beside each element.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gst/prism/gstprismasyncworker.h"

namespace {

using Worker = prism::GstPrismAsyncWorker;
using State = Worker::State;

// A gate a job (or a job maker) waits at until the test opens it; `reached` tells that it waits.
class Gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lk(m_);
    reached_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return open_; });
  }
  void wait_reached() {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return reached_; });
  }
  void open() {
    std::lock_guard<std::mutex> lk(m_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool reached_ = false, open_ = false;
};

class AsyncWorker : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  void SetUp() override { gst_segment_init(&segment_, GST_FORMAT_TIME); }

  // Makes a job of `in` (a new reference), with an output buffer in copy mode.
  Worker::MakeFn maker(GstBuffer* in, bool copy = false) {
    return [in, copy](GstBuffer** job_in, GstBuffer** job_out) {
      *job_in = gst_buffer_ref(in);
      *job_out = copy ? gst_buffer_new() : nullptr;
    };
  }
  static void release(Worker::Delivery& d) {
    gst_clear_buffer(&d.done);
    gst_clear_buffer(&d.picture);
  }

  GstSegment segment_;
};

const State kAll[] = {State::kIdle, State::kRunning, State::kFailed, State::kStopping, State::kStopped};

TEST_F(AsyncWorker, TheTransitionsAreExactlyTheWrittenOnes) {
  const std::vector<std::pair<State, State>> written = {
      {State::kIdle, State::kRunning},     {State::kIdle, State::kStopped},    {State::kRunning, State::kFailed},
      {State::kRunning, State::kStopping}, {State::kFailed, State::kStopping}, {State::kStopping, State::kStopped}};
  for (State from : kAll)
    for (State to : kAll) {
      bool listed = false;
      for (const auto& t : written) listed = listed || (t.first == from && t.second == to);
      EXPECT_EQ(Worker::allowed(from, to), listed) << Worker::state_name(from) << " -> " << Worker::state_name(to);
    }
  EXPECT_STREQ(Worker::state_name(State::kStopping), "stopping");
}

TEST_F(AsyncWorker, StopWithoutStartStopsAndAWorkerRunsOnce) {
  Worker w;
  EXPECT_EQ(w.state(), State::kIdle);
  GstBuffer* buf = gst_buffer_new();
  bool made = false;
  Worker::Delivery d = w.submit(0, segment_, false, [&](GstBuffer**, GstBuffer**) { made = true; });
  EXPECT_FALSE(d.taken) << "idle: nothing would run the job";
  EXPECT_FALSE(made);
  EXPECT_EQ(d.ret, GST_FLOW_OK);
  EXPECT_EQ(w.skipped(), 1u);
  w.stop();
  EXPECT_EQ(w.state(), State::kStopped);
  w.stop();
  EXPECT_EQ(w.state(), State::kStopped);
  EXPECT_FALSE(w.start([](const Worker::Job&) { return GST_FLOW_OK; })) << "a stopped worker does not start again";
  EXPECT_EQ(w.state(), State::kStopped);
  gst_buffer_unref(buf);
}

TEST_F(AsyncWorker, DoubleStartIsRefusedAndDoubleStopIsHarmless) {
  Worker w;
  ASSERT_TRUE(w.start([](const Worker::Job&) { return GST_FLOW_OK; }));
  EXPECT_EQ(w.state(), State::kRunning);
  EXPECT_FALSE(w.start([](const Worker::Job&) { return GST_FLOW_OK; }));
  w.stop();
  EXPECT_EQ(w.state(), State::kStopped);
  w.stop();
  EXPECT_EQ(w.state(), State::kStopped);
}

TEST_F(AsyncWorker, OneJobAtATimeFramesWhileBusyAreSkippedAndResultsGoOnTheNextFrame) {
  Worker w;
  Gate gate;
  std::vector<guint64> ran;
  std::vector<GstFormat> formats;
  ASSERT_TRUE(w.start([&](const Worker::Job& job) {
    ran.push_back(job.frame);
    formats.push_back(job.segment.format);
    if (job.frame == 0) gate.wait();
    return GST_FLOW_OK;
  }));
  GstBuffer *f0 = gst_buffer_new(), *f1 = gst_buffer_new(), *f2 = gst_buffer_new();
  Worker::Delivery d0 = w.submit(0, segment_, false, maker(f0));
  EXPECT_TRUE(d0.taken);
  EXPECT_EQ(d0.done, nullptr);
  gate.wait_reached();
  Worker::Delivery d1 = w.submit(1, segment_, false, maker(f1));
  EXPECT_FALSE(d1.taken) << "busy: skipped";
  EXPECT_EQ(w.skipped(), 1u);
  EXPECT_EQ(d1.done, nullptr) << "frame 0 is still running";
  gate.open();
  w.drain(false);
  Worker::Delivery d2 = w.submit(2, segment_, false, maker(f2));
  EXPECT_TRUE(d2.taken);
  EXPECT_EQ(d2.done, f0) << "the finished job's buffer goes on the next frame";
  EXPECT_EQ(d2.done_frame, 0u);
  release(d2);
  w.drain(false);
  Worker::Delivery d3 = w.submit(3, segment_, false, maker(f2));
  EXPECT_EQ(d3.done, f2);
  EXPECT_EQ(d3.done_frame, 2u);
  release(d3);
  w.drain(false);  // else stop() may drop job 3 before it starts (a queued job is dropped)
  w.stop();
  EXPECT_EQ(ran, (std::vector<guint64>{0, 2, 3}));
  for (GstFormat f : formats) EXPECT_EQ(f, GST_FORMAT_TIME) << "the job carries its frame's segment";
  EXPECT_EQ(w.skipped(), 1u);
  EXPECT_EQ(GST_MINI_OBJECT_REFCOUNT_VALUE(f0), 1) << "the worker keeps no reference after stop";
  EXPECT_EQ(GST_MINI_OBJECT_REFCOUNT_VALUE(f2), 1);
  gst_buffer_unref(f0);
  gst_buffer_unref(f1);
  gst_buffer_unref(f2);
}

TEST_F(AsyncWorker, DrainWithDropDropsTheResultsNotDelivered) {
  Worker w;
  ASSERT_TRUE(w.start([](const Worker::Job&) { return GST_FLOW_OK; }));
  GstBuffer* f0 = gst_buffer_new();
  Worker::Delivery d0 = w.submit(0, segment_, false, maker(f0));
  EXPECT_TRUE(d0.taken);
  w.drain(true);
  Worker::Delivery d1 = w.submit(1, segment_, false, maker(f0));
  EXPECT_TRUE(d1.taken);
  EXPECT_EQ(d1.done, nullptr) << "a flush, new caps or EOS drops what the job before it would deliver";
  w.stop();
  gst_buffer_unref(f0);
}

TEST_F(AsyncWorker, AFailureIsLatchedReturnedByEveryLaterFrameAndNotCounted) {
  Worker w;
  std::atomic<int> runs{0};
  ASSERT_TRUE(w.start([&](const Worker::Job&) {
    runs++;
    return GST_FLOW_ERROR;
  }));
  GstBuffer* f0 = gst_buffer_new();
  EXPECT_TRUE(w.submit(0, segment_, false, maker(f0)).taken);
  w.drain(false);
  EXPECT_EQ(w.state(), State::kFailed);
  for (guint64 f = 1; f < 4; ++f) {
    Worker::Delivery d = w.submit(f, segment_, false, maker(f0));
    EXPECT_EQ(d.ret, GST_FLOW_ERROR);
    EXPECT_FALSE(d.taken);
  }
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(w.skipped(), 0u) << "refused frames are not skipped frames";
  w.stop();
  EXPECT_EQ(w.state(), State::kStopped);
  EXPECT_EQ(w.submit(9, segment_, false, maker(f0)).ret, GST_FLOW_ERROR) << "the failure stays latched";
  gst_buffer_unref(f0);
}

TEST_F(AsyncWorker, StopWhileBusyWaitsForTheRunningJobAndDropsItsResult) {
  Worker w;
  Gate gate;
  std::atomic<bool> finished{false};
  ASSERT_TRUE(w.start([&](const Worker::Job&) {
    gate.wait();
    finished = true;
    return GST_FLOW_OK;
  }));
  GstBuffer* f0 = gst_buffer_new();
  EXPECT_TRUE(w.submit(0, segment_, false, maker(f0)).taken);
  gate.wait_reached();
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    w.stop();
    stopped = true;
  });
  while (w.state() != State::kStopping) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(stopped.load()) << "stop() returned while a job was running";
  Worker::Delivery during = w.submit(1, segment_, false, maker(f0));
  EXPECT_FALSE(during.taken) << "stopping: frames are skipped";
  gate.open();
  w.stop();  // a second stop, from another thread, returns once the first has joined
  EXPECT_TRUE(finished.load()) << "the running job is never cut short";
  EXPECT_EQ(w.state(), State::kStopped);
  stopper.join();
  EXPECT_TRUE(stopped.load());
  Worker::Delivery after = w.submit(2, segment_, false, maker(f0));
  EXPECT_FALSE(after.taken);
  EXPECT_EQ(after.done, nullptr) << "the result of the job running at stop is dropped";
  EXPECT_EQ(w.skipped(), 2u);
  EXPECT_EQ(GST_MINI_OBJECT_REFCOUNT_VALUE(f0), 1);
  gst_buffer_unref(f0);
}

TEST_F(AsyncWorker, AJobBeingMadeWhenStopComesIsDroppedAndCounted) {
  Worker w;
  std::atomic<int> runs{0};
  ASSERT_TRUE(w.start([&](const Worker::Job&) {
    runs++;
    return GST_FLOW_OK;
  }));
  GstBuffer* f0 = gst_buffer_new();
  Gate in_make, stop_done;
  std::thread stopper([&] {
    in_make.wait_reached();
    w.stop();
    stop_done.open();
  });
  Worker::Delivery d = w.submit(0, segment_, false, [&](GstBuffer** in, GstBuffer** out) {
    *in = gst_buffer_ref(f0);
    *out = nullptr;
    in_make.open();
    in_make.wait();    // marks it reached for the stopper (already open)
    stop_done.wait();  // stop() joins while the job is being made
  });
  stopper.join();
  EXPECT_FALSE(d.taken);
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(w.skipped(), 1u);
  EXPECT_EQ(GST_MINI_OBJECT_REFCOUNT_VALUE(f0), 1) << "the job made too late is dropped";
  gst_buffer_unref(f0);
}

TEST_F(AsyncWorker, CopyModeTheFirstFrameWaitsForItsPictureThenGetsTheNewest) {
  Worker w;
  Gate gate;
  ASSERT_TRUE(w.start([&](const Worker::Job& job) {
    if (job.frame == 0) gate.wait();
    return GST_FLOW_OK;
  }));
  GstBuffer* f0 = gst_buffer_new();
  std::thread opener([&] {
    gate.wait_reached();
    gate.open();
  });
  Worker::Delivery d0 = w.submit(0, segment_, true, maker(f0, true));
  opener.join();
  EXPECT_TRUE(d0.taken);
  ASSERT_NE(d0.picture, nullptr) << "the first frame waits for its own picture";
  ASSERT_NE(d0.done, nullptr);
  EXPECT_EQ(d0.done, d0.picture) << "copy mode: the finished job's buffer is its output";
  GstBuffer* first = d0.picture;
  Worker::Delivery d1 = w.submit(1, segment_, true, maker(f0, true));
  ASSERT_NE(d1.picture, nullptr) << "later frames take the newest picture without waiting";
  EXPECT_EQ(d1.picture, first) << "frame 1's job has not finished under the lock submit holds";
  release(d0);
  release(d1);
  w.drain(true);
  w.stop();
  Worker::Delivery d2 = w.submit(2, segment_, true, maker(f0, true));
  EXPECT_EQ(d2.picture, nullptr) << "stopped: no picture (the element returns FLUSHING)";
  gst_buffer_unref(f0);
}

TEST_F(AsyncWorker, TheDestructorJoinsARunningWorker) {
  std::atomic<int> runs{0};
  GstBuffer* f0 = gst_buffer_new();
  {
    Worker w;
    ASSERT_TRUE(w.start([&](const Worker::Job&) {
      runs++;
      return GST_FLOW_OK;
    }));
    w.submit(0, segment_, false, maker(f0));
  }
  EXPECT_LE(runs.load(), 1);
  EXPECT_EQ(GST_MINI_OBJECT_REFCOUNT_VALUE(f0), 1);
  gst_buffer_unref(f0);
}

}  // namespace
