/**
 * For backend implementers: what every backend shares so that all of them accept, reject and
 * account for the same programs. {@link dev.ttpipe.device.spi.CheckedOps} validates each op and
 * derives its output layout with {@link dev.ttpipe.device.spi.LayoutRules}, then calls the
 * backend's kernel; {@link dev.ttpipe.device.spi.DeviceMemory} does per-device accounting and
 * out-of-memory; {@link dev.ttpipe.device.spi.Sharding} says where each device's piece sits in the
 * logical tensor; {@link dev.ttpipe.device.spi.MeshDeviceBase}, {@link dev.ttpipe.device.spi.SubmeshBase},
 * {@link dev.ttpipe.device.spi.MeshSocketBase}, {@link dev.ttpipe.device.spi.MeshTensor} and
 * {@link dev.ttpipe.device.spi.Storage} are the common halves of meshes, submeshes, sockets, tensors
 * and their memory.
 * A new backend (the JNA ttnn one) extends these and passes the contract test suite.
 */
package dev.ttpipe.device.spi;
