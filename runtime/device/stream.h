// Stream and Event: the ordering handles of a Device (device.h does the work on them).
//
// Contract
// - A Stream is a FIFO queue of work on one device: copies, memsets, host functions, event
//   records and waits run in the order they were queued and never overlap each other. Work on
//   different streams may run concurrently; only events order it.
// - An Event marks a point in one stream: Device::RecordEvent captures all work queued on the
//   stream so far, and the event completes when that work has finished. Re-recording moves the
//   mark; waits already queued keep the old mark. An event never recorded counts as complete.
// - Both are created by their Device (CreateStream/CreateEvent), owned by the caller through a
//   unique_ptr, and must be destroyed before their device. Destroying a stream first finishes
//   the work queued on it (the destructor blocks the host until then).
// - They are opaque here: each device downcasts its own kinds. Passing a stream or event to a
//   device that did not create it is a programmer bug (a ZS_CHECK).
#pragma once

namespace zs {

class Device;

class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const Device& device() const { return *device_; }

 protected:
  explicit Stream(const Device* device) : device_(device) {}

 private:
  const Device* device_;
};

class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  const Device& device() const { return *device_; }

 protected:
  explicit Event(const Device* device) : device_(device) {}

 private:
  const Device* device_;
};

}  // namespace zs
