// A TCP proxy on 127.0.0.1 that a test puts on a link between two processes to break it on demand
// (tests/service/test_faults.cpp): the test's own network faults, since the build machines have no
// veth or netem. One thread forwards every connection accepted on port() to 127.0.0.1:target with
// poll(); the test switches what the link does:
//
//   forward()      bytes pass (after delay(), if any)
//   refuse()       new connections are closed at once, existing ones cut (a peer that is down)
//   partition()    bytes are held, in both directions, on every connection, new ones too (a network
//                  that drops packets: the peers wait); heal() then cuts every connection that
//                  lived through it, as a TCP connection times out, and forwards again
//   stall()        bytes are held and delivered whole at forward() (a partition shorter than TCP's
//                  retransmission: the connections survive it)
//   delay(ms)      every chunk is delivered `ms` after it arrived, in order
//   cut()          every existing connection is closed now; new ones are forwarded
//   partition_process(pid), heal_process(pid)
//                  as partition() and heal(), for the connections of one client process only
//                  (found by their socket's inode: /proc/net/tcp, then /proc/PID/fd): one
//                  worker cut off from Redis while the others go on
//
// gtest-free (tests/support).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace prism::test {

class FaultProxy {
 public:
  // Listens on a free port of 127.0.0.1 (port 0: a fixed `listen_port` is taken when given).
  explicit FaultProxy(int target_port, int listen_port = 0);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void set_target(int port);  // for connections accepted from now on

  void forward();  // also the end of stall(); see heal() for a partition
  void refuse();
  void partition();
  void heal();  // the end of a partition: its connections cut, then forward()
  void stall();
  void delay(std::chrono::milliseconds d);  // 0: none
  void cut();
  void partition_process(pid_t pid);
  void heal_process(pid_t pid);

  // What the link does now, in words ("forward", "refuse", "partition", "stall", "delay 50 ms").
  std::string mode() const;
  uint64_t accepted() const { return accepted_; }
  uint64_t cut_connections() const { return cut_; }
  int open_connections() const { return open_; }

 private:
  enum class Mode { kForward, kRefuse, kPartition, kStall };
  void run();
  void wake();

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  mutable std::mutex mutex_;
  int target_ = 0;
  Mode mode_ = Mode::kForward;
  std::chrono::milliseconds delay_{0};
  std::set<pid_t> isolated_;     // partition_process()
  uint64_t cut_generation_ = 0;  // cut() asks the thread to close every connection older than this
  // partition() calls: every connection open at one lived through it, however short (a heal()
  // before the thread saw the partition still cuts them, and nothing passed meanwhile).
  uint64_t partitions_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> accepted_{0}, cut_{0};
  std::atomic<int> open_{0};
  std::thread thread_;
};

}  // namespace prism::test
