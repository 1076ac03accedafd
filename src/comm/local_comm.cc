// In-process Comm: one mutex-protected mailbox per rank of each group. A send or receive that
// finds its partner already posted copies the bytes at once; otherwise it waits in the mailbox.
#include "comm/local_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "util/error.h"

namespace hp {
namespace detail {

struct LocalReq : RequestState {
  std::atomic<bool> done{false};
  int src = 0, dst = 0, tag = 0;  // ranks within the group
  int64_t bytes = 0;
  const void* send_buf = nullptr;
  void* recv_buf = nullptr;
  bool is_send = false;

  bool poll(Comm&) override { return done.load(std::memory_order_acquire); }
  int pending_peer() const override {
    return done.load(std::memory_order_acquire) ? -1 : (is_send ? dst : src);
  }
};

struct Mailbox {  // at the receiving rank
  std::deque<std::shared_ptr<LocalReq>> sends;  // arrived, not yet received
  std::deque<std::shared_ptr<LocalReq>> recvs;  // posted, not yet matched
};

struct LocalGroup {
  std::vector<int> world_ranks;  // group rank -> world rank
  std::vector<Mailbox> boxes;    // one per group rank
};

// Everything the ranks of one LocalWorld share; one mutex guards it all (tests, not speed).
struct LocalShared {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> epoch{0};
  std::atomic<bool> aborted{false};
  std::exception_ptr first_error;
  std::string first_message;
  std::vector<std::shared_ptr<LocalGroup>> groups;
  std::map<std::tuple<const LocalGroup*, int, int>, std::shared_ptr<LocalGroup>> splits;

  // Records the first failure and wakes every waiting rank so it fails too.
  void fail(std::exception_ptr e, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_error) {
        first_error = e;
        first_message = message;
      }
      aborted = true;
      ++epoch;
    }
    cv.notify_all();
  }
};

}  // namespace detail

namespace {

using detail::LocalGroup;
using detail::LocalReq;
using detail::LocalShared;

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

class LocalComm final : public Comm {
 public:
  LocalComm(std::shared_ptr<LocalShared> shared, std::shared_ptr<LocalGroup> group, int rank,
            const CommOptions& options)
      : Comm(options), shared_(std::move(shared)), group_(std::move(group)), rank_(rank),
        options_(options) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->world_ranks.size()); }
  int world_rank_of(int peer) const override { return group_->world_ranks.at(peer); }

  std::unique_ptr<Comm> split(int color, int key) override {
    // Every rank learns every (color, key) through the deterministic allreduce (exact for ints).
    std::vector<double> table(2 * static_cast<size_t>(size()), 0.0);
    table[2 * rank_] = color;
    table[2 * rank_ + 1] = key;
    allreduce_sum(table.data(), static_cast<int64_t>(table.size()));
    std::vector<int> members;
    for (int r = 0; r < size(); ++r)
      if (table[2 * r] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return table[2 * a + 1] < table[2 * b + 1]; });
    int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    std::shared_ptr<LocalGroup> group;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      auto& slot = shared_->splits[{group_.get(), split_count_, color}];
      if (!slot) {
        slot = std::make_shared<LocalGroup>();
        for (int r : members) slot->world_ranks.push_back(group_->world_ranks[r]);
        slot->boxes.resize(members.size());
        shared_->groups.push_back(slot);
      }
      group = slot;
    }
    ++split_count_;
    CommOptions o = options_;
    o.timeout_s = timeout();
    return std::make_unique<LocalComm>(shared_, group, new_rank, o);
  }

  [[noreturn]] void abort(const std::string& message) override {
    Error err(message);
    shared_->fail(std::make_exception_ptr(err), message);
    throw err;
  }

 protected:
  std::shared_ptr<RequestState> start_send(const void* buf, int64_t bytes, int peer,
                                           int tag) override {
    auto req = make_req(rank_, peer, tag, bytes);
    req->is_send = true;
    req->send_buf = buf;
    post(req, group_->boxes[peer].recvs, group_->boxes[peer].sends, rank_, tag);
    return req;
  }

  std::shared_ptr<RequestState> start_recv(void* buf, int64_t bytes, int peer, int tag) override {
    auto req = make_req(peer, rank_, tag, bytes);
    req->recv_buf = buf;
    post(req, group_->boxes[rank_].sends, group_->boxes[rank_].recvs, peer, tag);
    return req;
  }

  int tag_upper_bound() const override { return INT_MAX; }
  uint64_t activity() const override { return shared_->epoch.load(); }

  void idle(uint64_t seen, double max_s, int) override {
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait_for(lock, std::chrono::duration<double>(max_s),
                         [&] { return shared_->epoch.load() != seen || shared_->aborted.load(); });
    lock.unlock();
    throw_if_aborted();
  }

 private:
  std::shared_ptr<LocalReq> make_req(int src, int dst, int tag, int64_t bytes) {
    throw_if_aborted();
    auto req = std::make_shared<LocalReq>();
    req->src = src;
    req->dst = dst;
    req->tag = tag;
    req->bytes = bytes;
    return req;
  }

  // Matches `req` with the first partner in `partners` with the same (src, tag), or queues it.
  void post(const std::shared_ptr<LocalReq>& req, std::deque<std::shared_ptr<LocalReq>>& partners,
            std::deque<std::shared_ptr<LocalReq>>& queue, int src, int tag) {
    std::string mismatch;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      // Checked again under the lock (make_req's check is outside it): fail() sets `aborted` under
      // this mutex, and a rank that has seen the abort may already have freed the buffer of a
      // receive it left posted, so nothing is matched or copied once it is set.
      if (!shared_->aborted.load()) {
        auto it = std::find_if(partners.begin(), partners.end(),
                               [&](const auto& p) { return p->src == src && p->tag == tag; });
        if (it == partners.end()) {
          queue.push_back(req);
          return;
        }
        std::shared_ptr<LocalReq> other = *it;
        partners.erase(it);
        LocalReq& s = req->is_send ? *req : *other;
        LocalReq& r = req->is_send ? *other : *req;
        if (s.bytes != r.bytes) {
          mismatch = fmt::format(
              "message from rank {} to rank {} with tag {} has {} bytes but the receive expects {}",
              group_->world_ranks[s.src], group_->world_ranks[s.dst], tag, s.bytes, r.bytes);
        } else {
          if (s.bytes > 0) std::memcpy(r.recv_buf, s.send_buf, static_cast<size_t>(s.bytes));
          s.done.store(true, std::memory_order_release);
          r.done.store(true, std::memory_order_release);
          ++shared_->epoch;
        }
      }
    }
    throw_if_aborted();
    if (!mismatch.empty()) abort(mismatch);
    shared_->cv.notify_all();
  }

  void throw_if_aborted() const {
    if (!shared_->aborted.load()) return;
    std::string first;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      first = shared_->first_message;
    }
    fail("rank {}: stopped because another rank failed: {}", world_rank(), first);
  }

  std::shared_ptr<LocalShared> shared_;
  std::shared_ptr<LocalGroup> group_;
  int rank_;
  CommOptions options_;
  int split_count_ = 0;
};

}  // namespace

LocalWorld::LocalWorld(int n, const CommOptions& options) : shared_(std::make_shared<LocalShared>()) {
  HP_CHECK(n >= 1, "LocalWorld needs at least one rank, got {}", n);
  auto group = std::make_shared<LocalGroup>();
  for (int r = 0; r < n; ++r) group->world_ranks.push_back(r);
  group->boxes.resize(static_cast<size_t>(n));
  shared_->groups.push_back(group);
  for (int r = 0; r < n; ++r) comms_.push_back(std::make_unique<LocalComm>(shared_, group, r, options));
}

LocalWorld::~LocalWorld() = default;

Comm& LocalWorld::comm(int r) {
  HP_CHECK(r >= 0 && r < size(), "LocalWorld has no rank {} (size {})", r, size());
  return *comms_[static_cast<size_t>(r)];
}

void LocalWorld::run(const std::function<void(Comm&)>& fn) {
  HP_CHECK(!shared_->aborted.load(), "LocalWorld::run on a world that already failed: {}",
           shared_->first_message);
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([this, r, &fn] {
      try {
        fn(*comms_[static_cast<size_t>(r)]);
      } catch (...) {
        auto e = std::current_exception();
        shared_->fail(e, what_of(e));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (shared_->first_error) std::rethrow_exception(shared_->first_error);
  // A message nobody received (or a receive nobody sent) is a schedule bug even if no one waited.
  std::vector<std::string> leftovers;
  for (const auto& g : shared_->groups) {
    for (auto& box : g->boxes) {
      for (const auto& q : {&box.sends, &box.recvs}) {
        for (const auto& req : *q) {
          leftovers.push_back(fmt::format("{} from rank {} to rank {} tag {} ({} bytes)",
                                          req->is_send ? "send" : "receive",
                                          g->world_ranks[req->src], g->world_ranks[req->dst],
                                          req->tag, req->bytes));
        }
        q->clear();
      }
    }
  }
  if (!leftovers.empty()) {
    fail("LocalWorld::run finished with {} unmatched message(s), first: {}", leftovers.size(),
         leftovers.front());
  }
}

}  // namespace hp
