// The host-thread backend: N simulated devices as N threads of one process.
// Collectives meet at a rendezvous per group; each member publishes its
// buffers and then reads the parts it needs from its peers' memory, which is
// exactly the traffic the device counts (a reduce-scatter then an allgather
// for allreduce). Reductions run in member order, so every member gets
// bit-identical results. A collective of small inputs (small_bytes) copies
// them into the rendezvous instead and meets once: on a busy machine the
// wake-ups of a meeting cost more than copying a few KiB.
//
// Point-to-point messages are buffered in a mailbox per (sender, receiver,
// tag). A transfer moves through one exchange instead (host_world::board):
// each sender shows its source slice once, its receivers read it in place,
// and the sender returns once that is done, or copies its source out when a
// receiver does not take it soon.
//
// A device that waits watches for the change it waits for, yielding its core,
// before it sleeps (watched_condition, below): with more device threads than cores,
// sleeping and being woken costs far more than the wait itself.
//
// Nothing waits forever: a wait gives up after the world's timeout with an
// error naming the collective, the group and the devices that never came, and
// when any device fails, every waiting device stops with that device's message.
// A wait for a device that has already returned from the program fails at once.
//
// Giving up is safe: a member that leaves a collective early (it timed out,
// was stopped, or threw) breaks the group's meeting, so no meeting of that
// group completes any more and a late arrival fails instead of reading the
// buffers of members that are gone; and before it leaves (and its buffers
// are freed) it waits until no peer still reads them. Peers read only between
// two meetings, which takes no waiting, so that wait is short.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "typemesh/backend/host/copy_bytes.hpp"
#include "typemesh/core/error.hpp"
#include "typemesh/core/group.hpp"
#include "typemesh/runtime/communicator.hpp"
#include "typemesh/runtime/dtype.hpp"
#include "typemesh/runtime/member_order.hpp"
#include "typemesh/runtime/message_label.hpp"
#include "typemesh/runtime/traffic.hpp"

namespace typemesh {

// A lock whose waiters yield the core instead of sleeping, for state that
// every device of a transfer takes in turn for well under a microsecond (an
// exchange's board, the registry of boards). With 8 device threads on 2
// cores, a thread that found a std::mutex taken slept in the kernel until
// the holder's unlock woke it, which cost more than the critical section:
// conversions of 1 MiB took 10-30% longer (docs/performance.md). Never held
// across a wait (basic_watched_condition releases it).
class yielding_mutex {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// A condition variable whose waiters first watch a count of its changes,
// yielding the core in a loop, and sleep only when nothing has changed for
// `watch`. With 8 device threads on 2 cores, a thread that sleeps and is
// woken costs tens of microseconds: a barrier of 8 threads took 37 us with
// sleeping waits against 3-5 us with watched ones (docs/performance.md),
// and the change a device waits for (a message, a peer's arrival) usually
// comes as soon as the threads queued before it on its core have run. The
// helpers of a device's kernels watch the same way (host/thread_pool.hpp).
// Mutex: std::mutex, or yielding_mutex (then with std::condition_variable_any
// for the sleeps that follow a long watch).
template <class Mutex>
class basic_watched_condition {
 public:
  using clock = std::chrono::steady_clock;
  // How long a wait watches before it sleeps: waits within a step's
  // communication end well within it; a device waiting for a long
  // computation elsewhere gives up a fraction of its core meanwhile.
  static constexpr std::chrono::microseconds watch{500};

  // Under the lock that guards what changed: wakes every waiter.
  void notify() {
    changes_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
  }
  // Under the lock: counts a change whose waiters are woken by notify_all
  // once the lock is released (one wake-up fewer for each).
  void mark() { changes_.fetch_add(1, std::memory_order_release); }
  void notify_all() { cv_.notify_all(); }

  // Yields the core until done() or `until`; returns done().
  template <class Done>
  static bool watch_for(Done done, clock::time_point until) {
    while (!done()) {
      if (clock::now() >= until) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // Under lk: returns after a change (marked from now on), or at `until`
  // at the latest, or spuriously; callers check again. Watches until
  // `watch_until` (the wait's start + watch), then sleeps.
  void wait(std::unique_lock<Mutex>& lk, clock::time_point watch_until,
            clock::time_point until = clock::time_point::max()) {
    const std::uint64_t seen = changes_.load(std::memory_order_relaxed);
    if (const auto end = std::min(watch_until, until); clock::now() < end) {
      lk.unlock();
      watch_for([&] { return changes_.load(std::memory_order_acquire) != seen; }, end);
      lk.lock();
      if (changes_.load(std::memory_order_relaxed) != seen) return;
    }
    if (until == clock::time_point::max()) cv_.wait(lk);
    else cv_.wait_until(lk, until);
  }
  // Under lk: as wait, but what it watches until watch_until is changed(),
  // read without the lock, rather than every change marked here, so that
  // waiters for different things do not all take the lock at each change.
  template <class Changed>
  void wait_watching(std::unique_lock<Mutex>& lk, Changed changed, clock::time_point watch_until,
                     clock::time_point until = clock::time_point::max()) {
    if (const auto end = std::min(watch_until, until); clock::now() < end) {
      lk.unlock();
      watch_for(changed, end);
      lk.lock();
      return;
    }
    if (until == clock::time_point::max()) cv_.wait(lk);
    else cv_.wait_until(lk, until);
  }
  // Sleeps until pred() holds, without watching: the error paths.
  template <class Pred>
  void wait_until_true(std::unique_lock<Mutex>& lk, Pred pred) {
    cv_.wait(lk, pred);
  }

 private:
  std::conditional_t<std::is_same_v<Mutex, std::mutex>, std::condition_variable, std::condition_variable_any> cv_;
  std::atomic<std::uint64_t> changes_{0};
};
using watched_condition = basic_watched_condition<std::mutex>;

class host_world {
 public:
  host_world(int devices, std::chrono::milliseconds timeout) : size_(checked_size(devices)), timeout_(timeout),
      finished_(static_cast<std::size_t>(size_)), woken_(std::make_unique<watched_condition[]>(size_)) {}

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Stops every device that waits now or later. The first reason wins.
  void abort(int device, const std::string& reason) {
    std::lock_guard lk(abort_mutex_);
    if (!aborted_.load()) {
      abort_reason_ = detail::cat("device ", device, " failed: ", reason);
      aborted_.store(true);
    }
  }
  bool aborted() const { return aborted_.load(); }

  // Device `device` returned from the program: waiting for it is pointless.
  void mark_finished(int device) {
    std::lock_guard lk(mail_mutex_);  // after every message it posted
    finished_[device].store(true);
    for (int d = 0; d < size_; ++d) woken_[d].notify();
  }
  bool finished(int device) const { return finished_[device].load(); }

  [[noreturn]] void throw_aborted(int device, const std::string& where) const {
    std::lock_guard lk(abort_mutex_);
    throw aborted_error(detail::cat("device ", device, " stopped in ", where, " because ", abort_reason_));
  }

  // What one member publishes for a collective.
  struct call {
    op_kind kind{};
    std::size_t count = 0;
    dtype type{};
    reduce_op op{};
    int root = 0;
    const void* in = nullptr;
    void* out = nullptr;
    friend bool operator==(const call& a, const call& b) {
      return a.kind == b.kind && a.count == b.count && a.type == b.type && a.op == b.op && a.root == b.root;
    }
  };

  // A collective whose input is at most this many bytes per member meets
  // once: each member copies its input into the meeting place as it arrives
  // and reads its peers' copies after it, so no member waits for the others
  // to finish reading. On 8 threads of 2 cores, each meeting costs tens of
  // microseconds of wake-ups: more than copying a few KiB.
  static constexpr std::size_t small_bytes = 4096;

  // The meeting place of one group.
  struct rendezvous {
    explicit rendezvous(std::size_t members)
        : arrived(members, 0), reading(members, 0), calls{std::vector<call>(members), std::vector<call>(members)} {}
    std::mutex m;
    watched_condition cv;
    int waiting = 0;
    // Meetings completed; changed under m, watched without it (release:
    // what the members published under m is visible to a watcher that sees
    // the change).
    std::atomic<std::uint64_t> generation{0};
    std::vector<std::uint64_t> arrived;  // generation + 1 at each member's last arrival
    // Members past the last meeting of a collective that may read their
    // peers' buffers until they arrive at the next one.
    std::vector<char> reading;
    int readers = 0;
    // Set when a member gave up: no meeting of the group completes after it.
    std::string broken;
    bool broken_by_timeout = false;
    // Per parity of the meeting (generation % 2) a member publishes at: its
    // call, and a small collective's input (small_bytes a member, then one
    // slot more for a small allreduce's sum). Both stay until the meeting
    // after next, which no member reaches before every member has left the
    // first.
    std::array<std::vector<call>, 2> calls;
    std::array<std::vector<std::byte>, 2> small;
  };

  rendezvous& rendezvous_for(const group& g) {
    std::lock_guard lk(registry_mutex_);
    auto& r = groups_[g.devices];
    if (!r) r = std::make_unique<rendezvous>(g.devices.size());
    return *r;
  }

  // Publishes this member's call and small input (when given) and waits
  // until every member of g has arrived; returns the meeting's generation.
  // `what` names the collective. After a meeting that is not `closing`,
  // every member may read its peers' published buffers until its next
  // arrival.
  std::uint64_t arrive_and_wait(rendezvous& r, const group& g, int member, int device, std::string_view what,
                                bool closing, const call* publish = nullptr, std::span<const std::byte> small = {}) {
    std::unique_lock lk(r.m);
    stop_reading(r, member);
    auto where = [&] { return detail::cat(what, " over group ", detail::list(g.devices), " (", g.label, ")"); };
    if (!r.broken.empty()) give_up_broken(lk, r, device, where());
    if (aborted()) {
      withdraw(lk, r, "stopped because another device failed", false);
      throw_aborted(device, where());
    }
    const std::uint64_t gen = r.generation.load(std::memory_order_relaxed);
    if (publish) r.calls[gen % 2][member] = *publish;
    if (!small.empty()) {
      auto& slots = r.small[gen % 2];
      if (slots.empty()) slots.resize(static_cast<std::size_t>(g.size() + 1) * small_bytes);
      std::memcpy(slots.data() + member * small_bytes, small.data(), small.size());
    }
    r.arrived[member] = gen + 1;
    if (++r.waiting == g.size()) {
      r.waiting = 0;
      if (publish && !small.empty()) fold_small_allreduce(r, g, gen % 2, *publish);
      if (!closing) {
        std::fill(r.reading.begin(), r.reading.end(), 1);
        r.readers = g.size();
      }
      r.generation.store(gen + 1, std::memory_order_release);
      r.cv.mark();
      lk.unlock();  // a waiter that sleeps re-checks the generation under the lock: wake it unlocked
      r.cv.notify_all();
      return gen;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_, watch_until = start + watched_condition::watch;
    // The meeting usually completes within the watch. Watching without the
    // lock spares the members taking it all at once when it does, where one
    // that finds it taken would sleep.
    lk.unlock();
    if (watched_condition::watch_for([&] { return r.generation.load(std::memory_order_acquire) != gen; }, watch_until)) {
      return gen;
    }
    lk.lock();
    while (r.generation.load(std::memory_order_relaxed) == gen) {
      if (!r.broken.empty()) give_up_broken(lk, r, device, where());
      if (aborted()) {
        withdraw(lk, r, "stopped because another device failed", false);
        throw_aborted(device, where());
      }
      std::vector<int> missing;
      for (int i = 0; i < g.size(); ++i)
        if (r.arrived[i] != gen + 1) missing.push_back(g.devices[i]);
      for (int d : missing) {
        if (finished(d)) {
          std::string message = detail::cat(where(), " on device ", device, ": device ", d,
                                            " has already finished the program without joining it");
          withdraw(lk, r, message, false);
          throw collective_error(message);
        }
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        std::string message = detail::cat(where(), " on device ", device, " timed out after ", timeout_.count(),
                                          " ms: devices ", detail::list(missing), " never arrived");
        withdraw(lk, r, message, true);
        throw timeout_error(message);
      }
      r.cv.wait(lk, watch_until, std::min(deadline, now + poll_interval));
    }
    return gen;
  }

  // A member leaves a collective it will not finish (it is unwinding): no
  // meeting of the group completes any more, and it returns once no peer
  // reads its buffers.
  void leave(rendezvous& r, int member, int device, std::string_view what) {
    std::unique_lock lk(r.m);
    stop_reading(r, member);
    withdraw(lk, r, detail::cat("device ", device, " left ", what, " on an error"), false);
  }

 private:
  // A small allreduce's last member to arrive folds every member's input
  // into the meeting place's last slot, in member order, once; each member
  // then copies that slot. Before, every member folded all the inputs,
  // which were just written on other cores: seven times the reading. Only
  // when every member called the same; else the members report the
  // mismatch.
  static void fold_small_allreduce(rendezvous& r, const group& g, std::size_t parity, const call& c) {
    if (c.kind != op_kind::allreduce) return;
    for (const call& other : r.calls[parity])
      if (!(other == c)) return;
    auto& slots = r.small[parity];
    with_dtype(c.type, [&]<class T>() {
      std::vector<const T*> inputs(static_cast<std::size_t>(g.size()));
      for (int j = 0; j < g.size(); ++j) inputs[j] = reinterpret_cast<const T*>(slots.data() + j * small_bytes);
      detail::reduce_in_member_order<T>(reinterpret_cast<T*>(slots.data() + g.size() * small_bytes), inputs, 0,
                                        c.count, c.op);
    });
  }

  static void stop_reading(rendezvous& r, int member) {
    if (r.reading[member]) {
      r.reading[member] = 0;
      if (--r.readers == 0) r.cv.notify();
    }
  }

  // Breaks the meeting (the first reason stays) and waits, without a
  // timeout, until no peer reads: their reading takes no waiting.
  static void withdraw(std::unique_lock<std::mutex>& lk, rendezvous& r, const std::string& reason, bool timed_out) {
    if (r.broken.empty()) {
      r.broken = reason;
      r.broken_by_timeout = timed_out;
    }
    r.cv.notify();
    r.cv.wait_until_true(lk, [&] { return r.readers == 0; });
  }

  // A member that finds its group's meeting broken: stopped if the run is
  // failing, else a timeout or collective error that says why.
  [[noreturn]] void give_up_broken(std::unique_lock<std::mutex>& lk, rendezvous& r, int device, const std::string& where) {
    r.cv.wait_until_true(lk, [&] { return r.readers == 0; });
    const std::string reason = r.broken;
    const bool timed_out = r.broken_by_timeout;
    lk.unlock();
    if (aborted()) throw_aborted(device, where);
    std::string message = detail::cat(where, " on device ", device, " cannot complete: the group gave up (", reason, ")");
    if (timed_out) throw timeout_error(message);
    throw collective_error(message);
  }

  static int checked_size(int devices) {
    if (devices < 1) throw device_error(detail::cat("a run needs at least one device, not ", devices));
    return devices;
  }

 public:
  // Point-to-point messages, buffered at the receiver.
  struct message {
    dtype type{};
    std::size_t count = 0;
    std::unique_ptr<std::byte[]> bytes;  // uninitialised until the copy in
    std::size_t size = 0;
  };

  void post(int from, int to, int tag, message msg) {
    std::lock_guard lk(mail_mutex_);
    mail_[{from, to, tag}].push_back(std::move(msg));
    woken_[to].notify();
  }

  // The next message from `from`.
  message take(int from, int to, int tag) {
    std::unique_lock lk(mail_mutex_);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_, watch_until = start + watched_condition::watch;
    auto key = std::make_tuple(from, to, tag);
    auto where = [&] { return detail::cat("recv on device ", to, " from device ", from, " (", detail::describe_tag(tag), ")"); };
    for (;;) {
      auto it = mail_.find(key);
      if (it != mail_.end() && !it->second.empty()) {
        message msg = std::move(it->second.front());
        it->second.pop_front();
        return msg;
      }
      if (aborted()) {
        lk.unlock();
        throw_aborted(to, detail::cat("recv from device ", from, " (", detail::describe_tag(tag), ")"));
      }
      if (finished(from)) {  // its messages were posted before it finished, under this lock
        throw collective_error(detail::cat(where(), ": device ", from,
                                           " has already finished the program without sending it"));
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        throw timeout_error(detail::cat(where(), " timed out after ", timeout_.count(), " ms: no message arrived"));
      }
      woken_[to].wait(lk, watch_until, std::min(deadline, now + poll_interval));
    }
  }

  // The meeting place of one transfer (host_communicator::exchange): each
  // sender shows its source there once, and each receiver reads the sources
  // it needs in place. The `serial`-th exchange among the same members is
  // the same transfer on every device of a program that runs its transfers
  // in the same order; the first to arrive names it.
  struct board {
    explicit board(std::vector<int> m) : members(std::move(m)), sources(members.size()) {}
    // Changed under m; `published`, `untaken` and `reading` are also
    // watched without it, so that the waiters do not all take the lock at
    // each change, where one that finds it taken sleeps.
    struct shown {
      std::atomic<bool> published{false};
      bool detached = false;  // copied out into `owned`: the sender has gone on
      const std::byte* data = nullptr;
      std::size_t count = 0;
      dtype type{};
      std::vector<int> readers;
      std::vector<std::size_t> read_counts;
      std::vector<char> taken;
      std::atomic<int> untaken{0}, reading{0};
      std::unique_ptr<std::byte[]> owned;
    };
    yielding_mutex m;
    basic_watched_condition<yielding_mutex> changed;
    const std::vector<int> members;
    std::string what;  // the transfer, as the first member to arrive names it
    int first = -1;
    std::vector<shown> sources;  // by member index
    std::size_t left = 0;        // members that have returned from it
  };

  // Device `me`'s side of the serial-th exchange among `members` (those of
  // `side`); see exchanging_communicator. Errors name what this device
  // waited for; transfer() leads them with the transfer.
  void exchange(int me, const std::vector<int>& members, std::uint64_t serial, const exchange_side& side) {
    std::shared_ptr<board> b;
    {
      std::lock_guard lk(registry_mutex_);
      auto& slot = boards_[{members, serial}];
      if (!slot) slot = std::make_shared<board>(members);
      b = slot;
    }
    auto index = [&](int device) {
      return static_cast<std::size_t>(std::lower_bound(members.begin(), members.end(), device) - members.begin());
    };
    std::unique_lock lk(b->m);
    if (b->first < 0) {
      b->first = me;
      b->what = side.what;
    } else if (b->what != side.what) {
      throw collective_error(detail::cat(
          "device ", me, " expects its exchange ", serial, " with devices ", detail::list(members), " to belong to ",
          side.what, ", but device ", b->first, "'s exchange ", serial, " belongs to ", b->what,
          ": a device skipped a transfer, or the devices ran their transfers in different orders"));
    }
    board::shown& mine = b->sources[index(me)];
    if (!side.readers.empty()) {
      mine.data = static_cast<const std::byte*>(side.source);
      mine.count = side.source_count;
      mine.type = side.type;
      mine.readers.assign(side.readers.begin(), side.readers.end());
      mine.read_counts.assign(side.read_counts.begin(), side.read_counts.end());
      mine.taken.assign(side.readers.size(), 0);
      mine.untaken = static_cast<int>(side.readers.size());
      mine.published.store(true, std::memory_order_release);
      b->changed.notify();
    }
    std::exception_ptr failure;
    try {
      if (side.meanwhile) {
        lk.unlock();
        side.meanwhile(side.context);
        lk.lock();
      }
      read_shown(lk, *b, me, side, index);
    } catch (...) {
      failure = std::current_exception();
      if (!lk.owns_lock()) lk.lock();  // thrown where it was unlocked
    }
    if (!side.readers.empty()) settle_shown(lk, *b, mine);
    if (failure) std::rethrow_exception(failure);
    const bool last = ++b->left == members.size();
    lk.unlock();
    if (last) {
      std::lock_guard rk(registry_mutex_);
      boards_.erase({members, serial});
    }
  }

  // The messages nobody received, one line each (at most `limit`), once
  // every device has returned.
  std::vector<std::string> leftovers(std::size_t limit = 8) const {
    std::lock_guard lk(mail_mutex_);
    std::vector<std::string> lines;
    std::size_t more = 0;
    for (const auto& [key, queue] : mail_) {
      const auto [from, to, tag] = key;
      for (std::size_t i = 0; i < queue.size(); ++i) {
        const message& m = queue[i];
        std::string line;
        if (tag == detail::labelled_tag && m.type == dtype::u8 && m.size == detail::message_label::bytes) {
          const auto label = detail::message_label::decode(reinterpret_cast<const std::uint8_t*>(m.bytes.get()));
          line = detail::cat("device ", from, " sent device ", to, " ", label.count, " ", name_of(label.type), " of ",
                             label.what, " (its labelled message ", label.sequence, " to device ", to,
                             "), which device ", to, " never received");
          ++i;  // the data that follows the label
        } else {
          line = detail::cat("device ", from, " sent device ", to, " ", m.count, " ", name_of(m.type), " (",
                             detail::describe_tag(tag), "), which device ", to, " never received");
        }
        if (lines.size() < limit) lines.push_back(std::move(line));
        else ++more;
      }
    }
    std::lock_guard rk(registry_mutex_);
    for (const auto& [key, b] : boards_) {
      std::lock_guard bk(b->m);
      for (std::size_t i = 0; i < b->sources.size(); ++i) {
        const board::shown& s = b->sources[i];
        for (std::size_t k = 0; s.published && k < s.readers.size(); ++k) {
          if (s.taken[k]) continue;
          std::string line = detail::cat("device ", b->members[i], " sent device ", s.readers[k], " ", s.read_counts[k],
                                         " ", name_of(s.type), " of ", b->what, " (its exchange ", key.second,
                                         " with devices ", detail::list(b->members), "), which device ", s.readers[k],
                                         " never received");
          if (lines.size() < limit) lines.push_back(std::move(line));
          else ++more;
        }
      }
    }
    if (more) lines.push_back(detail::cat("and ", more, " more"));
    return lines;
  }

 private:
  // Reads every sender's source as soon as it is shown, in that order.
  template <class Index>
  void read_shown(std::unique_lock<yielding_mutex>& lk, board& b, int me, const exchange_side& side, Index index) {
    std::vector<int> pending;
    for (auto [sender, count] : side.senders) pending.push_back(sender);
    std::vector<std::pair<int, bool>> now_reading;  // sender, counted as reading
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_, watch_until = start + watched_condition::watch;
    while (!pending.empty()) {
      now_reading.clear();
      std::erase_if(pending, [&](int sender) {
        board::shown& s = b.sources[index(sender)];
        if (!s.published) return false;
        const auto k = std::find(s.readers.begin(), s.readers.end(), me) - s.readers.begin();
        if (k == static_cast<std::ptrdiff_t>(s.readers.size()) || s.taken[k]) return false;  // named below
        s.taken[k] = 1;
        --s.untaken;
        if (!s.detached) ++s.reading;
        now_reading.emplace_back(sender, !s.detached);
        return true;
      });
      if (!now_reading.empty()) {
        // Read without the lock; each source stays until its reading ends.
        std::exception_ptr failure;
        lk.unlock();
        for (auto [sender, counted] : now_reading) {
          try {
            if (!failure) side.read(side.context, sender, b.sources[index(sender)].data);
          } catch (...) {
            failure = std::current_exception();
          }
        }
        lk.lock();
        for (auto [sender, counted] : now_reading) {
          board::shown& s = b.sources[index(sender)];
          if (counted && --s.reading == 0) b.changed.notify();
        }
        if (failure) std::rethrow_exception(failure);
        continue;
      }
      auto where = [&] {
        return detail::cat("device ", me, " waits for devices ", detail::list(pending), " to show their sources");
      };
      for (int sender : pending) {
        const board::shown& s = b.sources[index(sender)];
        if (s.published) {
          throw collective_error(detail::cat(where(), ", but device ", sender, " shows its source to devices ",
                                             detail::list(s.readers), " only"));
        }
      }
      if (aborted()) {
        lk.unlock();
        throw_aborted(me, where());
      }
      for (int sender : pending) {
        if (finished(sender)) {  // it showed its source, if at all, before it finished (under this lock)
          throw collective_error(detail::cat(where(), ": device ", sender,
                                             " has already finished the program without sending it"));
        }
      }
      const auto t = std::chrono::steady_clock::now();
      if (t >= deadline) throw timeout_error(detail::cat(where(), ": timed out after ", timeout_.count(), " ms"));
      auto shown = [&] {
        return std::any_of(pending.begin(), pending.end(), [&](int sender) {
          return b.sources[index(sender)].published.load(std::memory_order_acquire);
        });
      };
      b.changed.wait_watching(lk, shown, watch_until, std::min(deadline, t + poll_interval));
    }
  }

  // Returns once the source `mine` is no longer read: every reader has
  // read it, or it is copied out for the readers that have not taken it
  // within source_grace (busy elsewhere), have finished or the run is failing.
  // Reading waits for nothing, so a reader being read for is waited for.
  void settle_shown(std::unique_lock<yielding_mutex>& lk, board& b, board::shown& mine) noexcept {
    const auto start = std::chrono::steady_clock::now();
    const auto grace = start + source_grace, watch_until = start + watched_condition::watch;
    for (;;) {
      if (mine.reading == 0 && mine.untaken == 0) return;
      if (mine.reading == 0) {
        bool gone = aborted() || std::chrono::steady_clock::now() >= grace;
        for (std::size_t k = 0; k < mine.readers.size() && !gone; ++k)
          gone = !mine.taken[k] && finished(mine.readers[k]);
        if (gone) {
          const std::size_t bytes = mine.count * size_of(mine.type);
          mine.owned.reset(new (std::nothrow) std::byte[std::max<std::size_t>(bytes, 1)]);
          if (mine.owned) {
            if (bytes) backend::host::copy_bytes(mine.owned.get(), mine.data, bytes);
            mine.data = mine.owned.get();
            mine.detached = true;
          } else {
            mine.published = false;  // its readers fail as if it had never been shown
            mine.data = nullptr;
          }
          b.changed.notify();
          return;
        }
      }
      auto read = [&] { return mine.reading.load() == 0 && mine.untaken.load() == 0; };
      if (mine.reading > 0) b.changed.wait_watching(lk, read, watch_until);
      else b.changed.wait_watching(lk, read, watch_until, std::min(grace, std::chrono::steady_clock::now() + poll_interval));
    }
  }

  static constexpr std::chrono::milliseconds poll_interval{20};
  // How long a sender waits for a receiver to take its source before
  // copying it out: ample for devices running the same program, short
  // enough that a program whose receiver is busy elsewhere loses little.
  static constexpr std::chrono::milliseconds source_grace{50};

  int size_;
  std::chrono::milliseconds timeout_;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;

  mutable yielding_mutex registry_mutex_;
  std::map<std::vector<int>, std::unique_ptr<rendezvous>> groups_;
  // Exchanges some member is still in, or whose sources some reader never took.
  std::map<std::pair<std::vector<int>, std::uint64_t>, std::shared_ptr<board>> boards_;

  std::vector<std::atomic<bool>> finished_;

  // Every message is under mail_mutex_. A device waits for its mail on its
  // own condition variable, so that a post wakes only the device it
  // concerns: with 8 devices on 2 cores, waking every waiting device for
  // each message cost more context switches than the copies took.
  mutable std::mutex mail_mutex_;
  std::unique_ptr<watched_condition[]> woken_;
  std::map<std::tuple<int, int, int>, std::deque<message>> mail_;
};

// One device's view of a host_world; a model of typemesh::communicator.
class host_communicator {
 public:
  host_communicator(host_world& world, int device) : world_(&world), device_(device) {}

  int device() const { return device_; }
  int device_count() const { return world_->size(); }
  int local_device() const { return device_; }  // every thread is on this one machine
  int devices_on_node() const { return world_->size(); }

  void allreduce(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    with_dtype(t, [&]<class T>() {
      const host_world::call c{op_kind::allreduce, n, t, op, 0, in, out};
      if (small(n * sizeof(T))) {
        // The last member to arrive folded the inputs in member order
        // (host_world::fold_small_allreduce): every member gets the same bits.
        session s(*this, g, c, true, bytes_of(in, n * sizeof(T)));
        if (n) backend::host::copy_bytes(out, s.small_sum(), n * sizeof(T));
        return;
      }
      const std::size_t gs = g.size();
      auto chunk_begin = [&](std::size_t m) { return m * n / gs; };
      const std::size_t me = g.index_of(device_), b = chunk_begin(me), e = chunk_begin(me + 1);
      std::vector<T> mine(e - b);  // outlives the session: peers read it until the closing meeting
      session s(*this, g, c);
      // Phase 1: reduce this member's chunk from every member's input.
      detail::reduce_in_member_order<T>(mine.data(), s.inputs<T>(), b, e - b, op);
      s.publish_scratch(mine.data());
      s.wait("allreduce");
      // Phase 2: gather the reduced chunks.
      for (std::size_t j = 0; j < gs; ++j) {
        const T* src = static_cast<const T*>(s.calls()[j].out);
        const std::size_t count = chunk_begin(j + 1) - chunk_begin(j);
        if (count) backend::host::copy_bytes(static_cast<T*>(out) + chunk_begin(j), src, count * sizeof(T));  // empty chunks may be null
      }
    });
  }

  void allgather(const group& g, const void* in, void* out, std::size_t n, dtype t) {
    const std::size_t bytes = n * size_of(t);
    session s(*this, g, {op_kind::allgather, n, t, {}, 0, in, out}, small(bytes), bytes_of(in, bytes));
    for (int j = 0; j < g.size() && bytes; ++j)  // empty buffers may be null: no memcpy at all
      backend::host::copy_bytes(static_cast<std::byte*>(out) + j * bytes, s.input(j), bytes);
  }

  void reduce_scatter(const group& g, const void* in, void* out, std::size_t n, dtype t, reduce_op op) {
    with_dtype(t, [&]<class T>() {
      const std::size_t bytes = g.size() * n * sizeof(T);
      session s(*this, g, {op_kind::reduce_scatter, n, t, op, 0, in, out}, small(bytes), bytes_of(in, bytes));
      detail::reduce_in_member_order<T>(static_cast<T*>(out), s.inputs<T>(), s.member * n, n, op);
    });
  }

  void alltoall(const group& g, const void* in, void* out, std::size_t n, dtype t) {
    const std::size_t bytes = n * size_of(t);
    session s(*this, g, {op_kind::alltoall, n, t, {}, 0, in, out}, small(g.size() * bytes),
              bytes_of(in, g.size() * bytes));
    for (int j = 0; j < g.size() && bytes; ++j) {  // empty buffers may be null: no memcpy at all
      backend::host::copy_bytes(static_cast<std::byte*>(out) + j * bytes, s.input(j) + s.member * bytes, bytes);
    }
  }

  void broadcast(const group& g, void* buffer, std::size_t n, dtype t, int root) {
    const std::size_t bytes = n * size_of(t);
    const bool is_root = g.index_of(device_) == root;  // only the root's input is read
    session s(*this, g, {op_kind::broadcast, n, t, {}, root, buffer, buffer}, small(bytes),
              is_root ? bytes_of(buffer, bytes) : std::span<const std::byte>{});
    if (!is_root && bytes) backend::host::copy_bytes(buffer, s.input(root), bytes);
  }

  void send(int to, const void* in, std::size_t n, dtype t, int tag) {
    host_world::message msg{t, n, std::make_unique_for_overwrite<std::byte[]>(n * size_of(t)), n * size_of(t)};
    if (msg.size) backend::host::copy_bytes(msg.bytes.get(), in, msg.size);
    world_->post(device_, to, tag, std::move(msg));
  }

  void recv(int from, void* out, std::size_t n, dtype t, int tag) {
    const host_world::message msg = world_->take(from, device_, tag);
    if (msg.type != t || msg.count != n) {
      throw collective_error(detail::cat("device ", device_, " expects ", n, " ", name_of(t), " from device ", from,
                                         " (", detail::describe_tag(tag), "), but the message holds ", msg.count, " ",
                                         name_of(msg.type)));
    }
    if (n) backend::host::copy_bytes(out, msg.bytes.get(), n * size_of(t));
  }

  // A transfer's pairs at once, through shared memory; see
  // exchanging_communicator.
  void exchange(const exchange_side& side) {
    auto& [members, made] = *exchanges_.try_emplace(std::vector<int>(side.members.begin(), side.members.end())).first;
    world_->exchange(device_, members, made++, side);
  }

  void barrier(const group& g) { session s(*this, g, {op_kind::barrier, 0, dtype::u8, {}, 0, nullptr, nullptr}, true); }

 private:
  static bool small(std::size_t bytes) { return bytes <= host_world::small_bytes; }
  static std::span<const std::byte> bytes_of(const void* p, std::size_t bytes) {
    return {static_cast<const std::byte*>(p), bytes};
  }

  // One collective from this member's side: publish, meet, check that every
  // member called the same thing, and on leaving wait until no peer reads
  // this member's buffers any more: at the closing meeting, or (when an
  // error unwinds it) by withdrawing from the group's meeting. A small one
  // (host_world::small_bytes) publishes a copy of its input instead, which
  // its peers read from the meeting place: one meeting, no closing one.
  struct session {
    session(host_communicator& c, const group& grp, host_world::call mine, bool small_input = false,
            std::span<const std::byte> input = {})
        : comm(c), g(grp), r(c.world_->rendezvous_for(grp)), member(grp.index_of(c.device_)), kind(mine.kind),
          small(small_input) {
      parity = comm.world_->arrive_and_wait(r, g, member, comm.device_, name_of(kind), small, &mine,
                                            small ? input : std::span<const std::byte>{}) % 2;
      for (int j = 0; j < g.size(); ++j) {
        if (!(calls()[j] == mine)) {
          comm.world_->leave(r, member, comm.device_, name_of(kind));  // no destructor runs for a failed constructor
          mismatch();
        }
      }
    }
    ~session() noexcept(false) {
      if (std::uncaught_exceptions() != exceptions_at_start) {
        comm.world_->leave(r, member, comm.device_, name_of(kind));
      } else if (!small) {
        comm.world_->arrive_and_wait(r, g, member, comm.device_, name_of(kind), true);
      }
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // The calls published at this collective's (first) meeting.
    const std::vector<host_world::call>& calls() const { return r.calls[parity]; }

    void wait(std::string_view what) { comm.world_->arrive_and_wait(r, g, member, comm.device_, what, false); }

    void publish_scratch(void* p) {
      std::lock_guard lk(r.m);
      r.calls[parity][member].out = p;
    }

    // Member j's input: its buffer, or the copy it published (none when
    // every input is empty).
    const std::byte* input(int j) const {
      if (!small) return static_cast<const std::byte*>(calls()[j].in);
      const auto& slots = r.small[parity];
      return slots.empty() ? nullptr : slots.data() + j * host_world::small_bytes;
    }

    // A small allreduce's sum, folded at the meeting.
    const std::byte* small_sum() const { return r.small[parity].data() + g.size() * host_world::small_bytes; }

    template <class T>
    std::vector<const T*> inputs() const {
      std::vector<const T*> v(g.size());
      for (int j = 0; j < g.size(); ++j) v[j] = reinterpret_cast<const T*>(input(j));
      return v;
    }

    [[noreturn]] void mismatch() const {
      std::string text;
      for (int j = 0; j < g.size(); ++j) {
        const auto& c = calls()[j];
        text += detail::cat(j ? "; " : "", "device ", g.devices[j], " calls ", name_of(c.kind), " of ", c.count, " ",
                             name_of(c.type));
        if (c.kind == op_kind::allreduce || c.kind == op_kind::reduce_scatter) text += detail::cat(" (", name_of(c.op), ")");
        if (c.kind == op_kind::broadcast) text += detail::cat(" from member ", c.root);
      }
      throw collective_error(detail::cat("the members of group ", detail::list(g.devices), " (", g.label,
                                         ") disagree on the collective: ", text));
    }

    host_communicator& comm;
    const group& g;
    host_world::rendezvous& r;
    int member;
    op_kind kind;
    bool small;
    std::size_t parity = 0;
    int exceptions_at_start = std::uncaught_exceptions();
  };

  host_world* world_;
  int device_;
  std::map<std::vector<int>, std::uint64_t> exchanges_;   // made so far, per set of members
};

static_assert(communicator<host_communicator>);
static_assert(exchanging_communicator<host_communicator>);

}  // namespace typemesh
